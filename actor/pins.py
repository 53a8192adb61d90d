"""python -m actor.pins [TASK] [--catalog FILE]: the pin of each planned tool, to paste into
the task's [[plan]] steps (`pin = "..."`). A pinned step refuses to run its tool once the
tool's server, name, description or schema changes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from actor import catalog as catalog_module
from airlock import task as task_module
from airlock.errors import AirlockError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actor.pins")
    parser.add_argument("task", nargs="?", default="tasks/order_status.toml")
    parser.add_argument("--catalog", type=Path, default=catalog_module.DEFAULT_PATH)
    args = parser.parse_args(argv)
    try:
        task, catalog = task_module.load(args.task), catalog_module.load(args.catalog)
    except AirlockError as exc:
        print(f"actor.pins: {exc}", file=sys.stderr)
        return 78
    for step in task.plan:
        tool = catalog.get((step.server, step.tool))
        print(f'call = "{step.call}"  pin = "{tool.pin if tool else "(not in the catalog)"}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
