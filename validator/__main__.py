"""python -m validator: settings -> the task's narrow type -> channel -> serve(handle)."""

import sys

from airlock.service import main
from validator.app import serve

if __name__ == "__main__":
    sys.exit(main("validator", serve))
