"""python -m ops.lifeline PARENT_PID MODULE: run `python -m MODULE`, dying with PARENT_PID.

How `airlock up` starts each child: a supervisor killed with -9 can stop no one, and its
children, left serving unsupervised on the stack's ports and files, would meet the next
`airlock up` on the same data dir (two actors sharing one call log). Here the
child arranges its own death first (airlock.locks.die_with_parent: the kernel's
parent-death signal on Linux, a watching thread elsewhere), then runs the service as
`python -m MODULE` would. The services themselves know nothing of it: the compose lab runs
them with no supervisor and no lifeline.
"""

from __future__ import annotations

import runpy
import sys

from airlock.errors import EX_USAGE
from airlock.locks import die_with_parent


def main(argv: list[str]) -> None:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m ops.lifeline PARENT_PID MODULE", file=sys.stderr)
        sys.exit(EX_USAGE)
    parent, module = int(argv[0]), argv[1]
    die_with_parent(parent)
    sys.argv = [sys.argv[0]]  # the service sees no arguments, as under `python -m MODULE`
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
