"""python -m reader [--model-url URL]: settings -> channel -> serve(handle)."""

import argparse
import os
import sys

from airlock.service import main
from reader.app import serve

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m reader")
    parser.add_argument("--model-url", help="OpenAI-compatible endpoint (default $AIRLOCK_MODEL_URL)")
    args = parser.parse_args()
    overrides = {"AIRLOCK_MODEL_URL": args.model_url} if args.model_url else {}
    sys.exit(main("reader", serve, env={**os.environ, **overrides}))
