"""Tool calls out of model text, the permissive way a naive agent reads them.

Three shapes are accepted, as many agents accept them: function-call JSON
(`{"name": "shop/refund_all", "arguments": {...}}` and the usual variants), `tool(args)`
lines, and `[[tool:server/tool]]` markers. A bare tool name is resolved to the first
catalog tool with that name: the identity confusion seed 000 warns about, kept on purpose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MARKER = re.compile(r"\[\[tool:([a-z][a-z0-9-]*)/([a-z][a-z0-9_-]*)\]\]")
CALL_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*(?:/[A-Za-z][A-Za-z0-9_-]*)?)\s*\(([^()\n]*)\)")
JSON_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")
KEY_VALUE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\"[^\"]*\"|'[^']*'|[^,]*)\s*(?:,|$)")


@dataclass(frozen=True)
class Proposed:
    name: str  # as the model wrote it: "shop/refund_all" or just "refund_all"
    args: dict[str, Any] = field(default_factory=dict)
    shape: str = "line"


def parse(text: str) -> list[Proposed]:
    """Every tool call the text proposes, in order of appearance."""
    found: list[tuple[int, Proposed]] = []
    spans: list[tuple[int, int]] = []
    for m in JSON_OBJECT.finditer(text):
        proposed = _from_json(m.group(0))
        if proposed is not None:
            found.append((m.start(), proposed))
            spans.append(m.span())
    for m in MARKER.finditer(text):
        found.append((m.start(), Proposed(f"{m.group(1)}/{m.group(2)}", {}, "marker")))
        spans.append(m.span())
    for m in CALL_LINE.finditer(text):
        if not any(start <= m.start() < end for start, end in spans):
            found.append((m.start(), Proposed(m.group(1), _arguments(m.group(2)), "line")))
    return [p for _, p in sorted(found, key=lambda item: item[0])]


def _from_json(raw: str) -> Proposed | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    for key in ("tool_call", "function"):
        if isinstance(data.get(key), dict):
            data = {**data, **data[key]}
    name = data.get("name") or data.get("tool")
    if isinstance(data.get("server"), str) and isinstance(name, str) and "/" not in name:
        name = f"{data['server']}/{name}"
    args = data.get("arguments", data.get("args", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {"input": args}
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    return Proposed(name, args, "json")


def _arguments(text: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        return {}
    pairs = KEY_VALUE.findall(text)
    if pairs:
        return {key: value.strip().strip("\"'") for key, value in pairs}
    return {"_": text.strip("\"'")}  # one positional value; the agent gives it to the first argument


def resolve(name: str, pairs: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """A full pair as written, or the first tool anywhere with that bare name."""
    pairs = list(pairs)
    if "/" in name:
        server, tool = name.split("/", 1)
        return (server, tool) if (server, tool) in pairs else None
    return next((pair for pair in pairs if pair[1] == name), None)
