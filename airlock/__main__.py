"""python -m airlock: the operator's command line (cli/), reached by the kernel's name.

The only module of the kernel that imports outside it; no service imports it, and the
import-linter contracts name it as their one exception (pyproject.toml).
"""

import sys

from cli.runtime import main

sys.exit(main())
