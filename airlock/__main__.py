import sys

from airlock.cli import main

sys.exit(main())
