"""The plan, bound to the catalog before any message arrives.

Binding finds each step's tool by its full server/tool pair (the bound rule of
selection.py: descriptions never choose), and checks the step's pin, its permission grant
and its arguments against the tool's schema, including the type the narrow value will
have. If anything does not fit, the actor refuses to start: there is no partial plan.
A bound step keeps the tool's policy fields as they were at start, so even an unpinned
step is refused once the live catalog relabels its tool (class, permission, timeout).
"""

from __future__ import annotations

from typing import Any

import msgspec

from actor.catalog import Catalog, Tool
from actor.selection import bound_pair
from airlock.errors import CatalogError
from airlock.task import IntegerRange, Step, Task

_SAMPLE = {"str": "", "int": 0, "bool": False, "float": 0.0}
_PY_TYPE = {"str": str, "int": int, "bool": bool, "float": float}


class BoundStep(msgspec.Struct, frozen=True):
    number: int
    pair: tuple[str, str]
    value_into: str | None
    fixed: dict[str, Any]
    grant: str
    pin: str | None
    policy: dict[str, Any] = {}  # the tool's policy fields at bind time (Tool.policy)

    def arguments(self, value: int | str) -> dict[str, Any]:
        args = dict(self.fixed)
        if self.value_into is not None:
            args[self.value_into] = value
        return args


def structural_problem(step: BoundStep, catalog: Catalog) -> tuple[str, str, Tool | None]:
    """(rule, reason, tool) for the first structural check the step fails in this catalog,
    or ("", "", tool) when it passes: plan pair, pin, permission, policy as bound. The tool
    is None only when the plan check fails (no such pair in the catalog)."""
    pair = bound_pair(catalog.keys(), step.pair)
    if pair is None:
        return "plan", f"{step.pair[0]}/{step.pair[1]} is not in the catalog", None
    tool = catalog[pair]
    if step.pin is not None and tool.pin != step.pin:
        return "pin", (f"pin failed for {tool.server}/{tool.tool}: the plan pinned {step.pin[:12]}…, "
                       f"the catalog now has {tool.pin[:12]}…"), tool
    if tool.permission == "write" and step.grant != "write":
        return "permission", f"the step grants {step.grant}, {tool.server}/{tool.tool} needs write", tool
    policy = tool.policy  # a field the tool declares now and did not at start is a relabel too
    changed = sorted(name for name in step.policy.keys() | policy.keys() if policy.get(name) != step.policy.get(name))
    if changed and step.policy:  # an empty bound policy: a step bind() has not bound yet
        now = ", ".join(f"{name} {step.policy.get(name)!r} -> {policy.get(name)!r}" for name in changed)
        return "policy", f"the catalog relabelled {tool.server}/{tool.tool} since start ({now})", tool
    return "", "", tool


def bind(task: Task, catalog: Catalog) -> list[BoundStep]:
    value_type = "int" if isinstance(task.value, IntegerRange) else "str"
    steps = []
    for number, step in enumerate(task.plan, start=1):
        bound = BoundStep(number, (step.server, step.tool), step.value_into, dict(step.args), step.grant, step.pin)
        where = f"plan step {number} ({step.call})"
        rule, reason, tool = structural_problem(bound, catalog)
        if tool is None:  # the plan rule failed: the pair is not in the catalog
            raise CatalogError(f"{where}: no such tool in the catalog")
        if rule:
            raise CatalogError(f"{where}: {reason}")
        _check_arguments(step, tool, value_type, where)
        steps.append(msgspec.structs.replace(bound, policy=tool.policy))
    return steps


def _check_arguments(step: Step, tool: Tool, value_type: str, where: str) -> None:
    given: dict[str, object] = dict(step.args)  # only its names are compared
    if step.value_into is not None:
        if step.value_into in given:
            raise CatalogError(f"{where}: '{step.value_into}' is both fixed and the value slot")
        arg = tool.args.get(step.value_into)
        if arg is None or arg.type != value_type:
            raise CatalogError(f"{where}: the tool has no {value_type} argument '{step.value_into}'")
        given[step.value_into] = _SAMPLE[value_type]
    unknown = set(given) - set(tool.args)
    if unknown:
        raise CatalogError(f"{where}: fixed argument {sorted(unknown)} is not in the tool's schema")
    missing = set(tool.args) - set(given)
    if missing:
        raise CatalogError(f"{where}: arguments {sorted(missing)} are not filled")
    for name, fixed in step.args.items():
        if type(fixed) is not _PY_TYPE[tool.args[name].type]:
            raise CatalogError(f"{where}: fixed argument '{name}' does not match the tool's schema")
