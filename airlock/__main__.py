import sys

from cli.runtime import main

sys.exit(main())
