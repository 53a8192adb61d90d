"""python -m intake: settings -> SMTP listener -> serve until SIGTERM or SIGINT."""

import sys

from airlock.service import main
from intake.app import serve

if __name__ == "__main__":
    sys.exit(main("intake", serve, needs_task=False))
