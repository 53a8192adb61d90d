"""python -m lab: the labs' commands (lab/commands.py: list, start, check, ...) and the tools
around the runtime (lab/cli.py: attack, verify, record, pins, naive, model, corpus, bench, prompts,
k8s, swarm), each run through airlock.cli.handled."""

import sys

from lab import cli

argv = sys.argv[1:]
if argv[:1] and argv[0] in cli.COMMANDS:
    sys.exit(cli.main(argv))

from lab.commands import main  # noqa: E402 - the labs' graders, imported only for their commands

sys.exit(main(argv))
