"""python -m lab: the labs' commands (lab/commands.py: list, start, check, ...) and the tools
around the runtime (lab/cli.py: attack, verify, record, pins, naive, model, corpus, bench)."""

import sys

from lab import cli, commands

argv = sys.argv[1:]
sys.exit(cli.main(argv) if argv[:1] and argv[0] in cli.COMMANDS else commands.main(argv))
