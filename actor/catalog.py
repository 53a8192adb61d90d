"""The tool catalog: which server/tool pairs exist and what arguments each takes.

Loaded strictly at start; a duplicate pair or an unknown key stops the actor.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from airlock.errors import CatalogError

DEFAULT_PATH = Path(__file__).with_name("catalog.toml")


class Arg(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    type: Literal["str", "int", "bool"]
    max_length: Annotated[int, msgspec.Meta(ge=1)] | None = None


class Tool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    server: str
    tool: str
    description: str
    permission: Literal["read", "write"]
    args: dict[str, Arg] = {}

    @property
    def pair(self) -> tuple[str, str]:
        return (self.server, self.tool)


class _CatalogFile(msgspec.Struct, forbid_unknown_fields=True):
    tools: list[Tool]


Catalog = dict[tuple[str, str], Tool]


def load(path: Path = DEFAULT_PATH) -> Catalog:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        tools = msgspec.convert(data, _CatalogFile, strict=True).tools
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise CatalogError(f"catalog {path}: {exc}") from exc
    catalog: Catalog = {}
    for tool in tools:
        if tool.pair in catalog:
            raise CatalogError(f"catalog {path}: {tool.server}/{tool.tool} is listed twice")
        catalog[tool.pair] = tool
    return catalog
