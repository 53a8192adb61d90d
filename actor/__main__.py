"""python -m actor: settings -> plan bound to the catalog (or refuse to start) -> serve."""

import sys

from actor.app import serve
from airlock.service import main

if __name__ == "__main__":
    sys.exit(main("actor", serve))
