"""python -m lab: the labs' commands (cli/lab.py: list, start, check, ...) and the tools
around the runtime (cli/tools.py: attack, verify, record, pins, naive, model, corpus, bench)."""

import sys

from cli import tools as cli

argv = sys.argv[1:]
if argv[:1] and argv[0] in cli.COMMANDS:
    sys.exit(cli.main(argv))

from cli.lab import main  # noqa: E402 - the labs' graders, imported only for their commands

sys.exit(main(argv))
