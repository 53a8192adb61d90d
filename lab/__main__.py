"""python -m lab: `airlock lab ...` (list, start, check, ...), and `airlock TOOL ...` for a tool
of cli/tools.py (attack, verify, record, ...). An alias kept for the lab image's entrypoint and
the lines the labs print; cli/ dispatches every command."""

import sys

from cli import runtime, tools

argv = sys.argv[1:]
sys.exit(runtime.main(argv if argv[:1] and argv[0] in tools.COMMANDS else ["lab", *argv]))
