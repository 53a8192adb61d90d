"""The plan, bound to the catalog before any message arrives.

Binding checks every step against the catalog by its full server/tool pair, and its
arguments against the tool's schema (including the type the narrow value will have). If
anything does not fit, the actor refuses to start: there is no partial plan.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actor.catalog import Catalog, Tool
from airlock.errors import CatalogError
from airlock.task import IntegerRange, Task

_PY_TYPE = {"str": str, "int": int, "bool": bool}


class BoundStep(msgspec.Struct, frozen=True):
    number: int
    tool: Tool
    value_into: str | None
    fixed: dict[str, Any]

    def arguments(self, value: int | str) -> dict[str, Any]:
        args = dict(self.fixed)
        if self.value_into is not None:
            args[self.value_into] = value
        return args


def bind(task: Task, catalog: Catalog) -> list[BoundStep]:
    value_type = "int" if isinstance(task.value, IntegerRange) else "str"
    steps = []
    for number, step in enumerate(task.plan, start=1):
        where = f"plan step {number} ({step.call})"
        tool = catalog.get((step.server, step.tool))
        if tool is None:
            raise CatalogError(f"{where}: no such tool in the catalog")
        given = dict(step.args)
        if step.value_into is not None:
            if step.value_into in given:
                raise CatalogError(f"{where}: '{step.value_into}' is both fixed and the value slot")
            arg = tool.args.get(step.value_into)
            if arg is None or arg.type != value_type:
                raise CatalogError(f"{where}: the tool has no {value_type} argument '{step.value_into}'")
        for name, fixed in given.items():
            arg = tool.args.get(name)
            if arg is None or type(fixed) is not _PY_TYPE[arg.type]:
                raise CatalogError(f"{where}: fixed argument '{name}' does not match the tool's schema")
        missing = set(tool.args) - set(given) - {step.value_into}
        if missing:
            raise CatalogError(f"{where}: arguments {sorted(missing)} are not filled")
        steps.append(BoundStep(number, tool, step.value_into, given))
    return steps
