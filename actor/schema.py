"""A tool's argument schema as a strict msgspec type: exact keys, no coercion.

bool is not an int, an int is not a float's string, strings have lengths and anchored
patterns, numbers have ranges and must be finite. Checked before any side effect.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec

from actor.catalog import Arg, Tool


def _field_type(arg: Arg) -> Any:
    if arg.type == "bool":
        return bool
    if arg.type == "str":
        pattern = rf"\A(?:{arg.pattern})\Z" if arg.pattern else None
        return Annotated[str, msgspec.Meta(max_length=arg.max_length, pattern=pattern)]
    base = int if arg.type == "int" else float
    return Annotated[base, msgspec.Meta(ge=arg.min, le=arg.max)]


_types: dict[str, type] = {}  # by the tool's pin: a changed schema gets a new type


def args_type(tool: Tool) -> type:
    if tool.pin not in _types:
        fields = [(name, _field_type(arg)) for name, arg in sorted(tool.args.items())]
        _types[tool.pin] = msgspec.defstruct(f"{tool.server}_{tool.tool}_args", fields,
                                             forbid_unknown_fields=True, frozen=True)
    return _types[tool.pin]


def problem(tool: Tool, args: dict[str, Any]) -> str | None:
    """None if `args` fit the tool's schema exactly, else why not."""
    try:
        msgspec.convert(args, args_type(tool), strict=True)
    except msgspec.ValidationError as exc:
        return str(exc)
    for name, value in args.items():
        if isinstance(value, float) and not math.isfinite(value):
            return f"Expected a finite number - at `$.{name}`"
    return None
