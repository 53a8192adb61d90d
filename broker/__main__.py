"""python -m broker: settings -> sockets -> serve."""

import sys

from airlock.service import main
from broker.app import serve

if __name__ == "__main__":
    sys.exit(main("broker", serve, needs_task=False))
