"""python -m broker [--insecure]: settings -> sockets -> serve.

--insecure is AIRLOCK_INSECURE=1: serve without CURVE when no keys are found (broker/auth.py).
"""

import os
import sys

from airlock.errors import EX_USAGE
from airlock.service import main
from broker.app import serve

if __name__ == "__main__":
    unknown = [arg for arg in sys.argv[1:] if arg != "--insecure"]
    if unknown:
        print(f"broker: unknown argument {unknown[0]!r} (only --insecure; settings are AIRLOCK_* variables)",
              file=sys.stderr)
        sys.exit(EX_USAGE)
    env = {**os.environ, "AIRLOCK_INSECURE": "1"} if "--insecure" in sys.argv[1:] else None
    sys.exit(main("broker", serve, needs_task=False, env=env))
