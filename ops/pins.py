"""`airlock pins [TASK] [--catalog FILE]`: the pin of each planned tool, to paste into the
task's [[plan]] steps (`pin = "..."`). A pinned step refuses to run its tool once the
tool's server, name, description, schema or policy (permission, class, timeout, the facts
it provides) changes. The pin itself is the actor's (actor/catalog.py), which checks it
before every call; only this printing tool lives here."""

from __future__ import annotations

from pathlib import Path

from actor import catalog as catalog_module
from airlock import task as task_module


def run(task_path: str, catalog_path: Path | None = None) -> int:
    """A bad task or catalog (ConfigError) goes up to cli.runtime.handled: one line, exit 78."""
    task = task_module.load(task_path)
    catalog = catalog_module.load(catalog_path or catalog_module.DEFAULT_PATH)
    for step in task.plan:
        tool = catalog.get((step.server, step.tool))
        print(f'call = "{step.call}"  pin = "{tool.pin if tool else "(not in the catalog)"}"')
    return 0

