"""python -m lab: the lab commands (lab/commands.py)."""

import sys

from lab.commands import main

sys.exit(main())
