"""python -m actor: settings -> plan bound to the catalog (or refuse to start) -> serve.

A ledger the actor cannot use (another actor holds it, the disk refuses it, it was replaced
while running) exits 75 (EX_TEMPFAIL) with one line: the supervisor restarts on anything but
78, and each of these can clear by itself (the other actor dies, space returns).
"""

import sys

from actor.app import serve
from actor.ledger import LedgerError
from airlock.errors import EX_TEMPFAIL
from airlock.service import main

if __name__ == "__main__":
    try:
        sys.exit(main("actor", serve))
    except LedgerError as exc:
        print(f"actor: {exc}", file=sys.stderr)
        sys.exit(EX_TEMPFAIL)
