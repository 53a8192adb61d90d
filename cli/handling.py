"""The one error handler every command runs through, and where its exit codes come from.

A failure the user can cause or meet is one escaped line on stderr, `PREFIX: message`, and
the exit code airlock.errors.exit_code gives its error (the one table: 1 a refusal or a
runtime failure, 2 bad usage, 73 a data dir another stack holds, 74 a full disk, 75 a full
queue, 78 bad configuration); 130 after Ctrl-C; 0 when the reader of stdout went away.
A command translates its own errors into airlock's at its edge (cli/lab.py: an unknown lab
is bad usage, a broken lab.toml bad configuration). Tracebacks are bugs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from airlock.errors import EX_INTERRUPTED, AirlockError, exit_code
from airlock.terminal import shown


def handled(run: Callable[[], int], prefix: str = "airlock", wording: Callable[[str], str] = str) -> int:
    """run(), its failures turned into one line on stderr and an exit code. `wording` renders
    a message for where the user is (the lab's container names its own commands)."""
    try:
        return run()
    except AirlockError as exc:
        print(f"{prefix}: {shown(wording(str(exc)))}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        return EX_INTERRUPTED
    except BrokenPipeError:
        return 0
