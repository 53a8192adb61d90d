"""The tool catalog: which server/tool pairs exist, their schemas, permissions and classes.

Loaded strictly at start; a duplicate pair or an unknown key stops the actor. Each tool's
pin is the sha256 of its server, name, description, schema and every field that decides
policy (permission, blast radius, reversibility, timeout, the facts it provides): a plan
step that pins a tool refuses to run it once any of those changes under it (a "rug pull"),
so a provider cannot relabel a third-party tool as internal and switch off the
preconditions that attach to it, nor relabel where the facts they read come from.

What the executor needs to know of a tool it reads here, from the catalog's declarations;
a tool's `mock` table says only how the mock behind it behaves (actor/mocks.py).
"""

from __future__ import annotations

import functools
import hashlib
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from airlock import senders
from airlock.errors import CatalogError

DEFAULT_PATH = Path(__file__).with_name("catalog.toml")


class Arg(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    type: Literal["str", "int", "float", "bool"]
    max_length: Annotated[int, msgspec.Meta(ge=1)] | None = None
    min: int | float | None = None
    max: int | float | None = None
    pattern: str | None = None


_NAME = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]*$")]
# The lineages the executor gives the facts it holds itself: the narrow value ("email") and
# the sender (authenticated or not, airlock/senders.py). A tool's result cannot claim one.
ACTOR_LINEAGES = frozenset({"email", senders.AUTHENTICATED, senders.UNVERIFIED})


class Provides(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Facts a tool's result gives the preconditions of later steps: `<fact>.<field>` for
    each field, read from the result, all of one lineage (the upstream their values are
    copied from; corroboration counts independent lineages, a provenance rule names one).
    For example shop/lookup_order provides order.customer, order.status and order.found, of
    lineage order_store."""

    fact: _NAME
    fields: Annotated[tuple[_NAME, ...], msgspec.Meta(min_length=1)]
    lineage: _NAME


class Mock(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the mock behind a tool behaves: what it returns, and test-only misbehaviour."""

    returns: Literal["ack", "order"] = "ack"
    # Who a mail tool writes to: "order_owner" is the order store's customer for the order
    # in its arguments, never the requester; calls.jsonl records it as `to`.
    sends_to: Literal["nobody", "order_owner"] = "nobody"
    delay_s: float = 0.0  # a slow tool
    result_bytes: int = 0  # an oversized result
    fail: str = ""  # a tool that raises


class Tool(msgspec.Struct, frozen=True, forbid_unknown_fields=True, dict=True):  # dict: for cached_property
    server: str
    tool: str
    description: str
    permission: Literal["read", "write"]
    blast_radius: Literal["internal", "third_party"]
    reversibility: Literal["reversible", "irreversible"]
    args: dict[str, Arg] = {}
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 5.0  # applied to every call of the tool
    provides: Provides | None = None
    mock: Mock = Mock()

    @property
    def pair(self) -> tuple[str, str]:
        return (self.server, self.tool)

    @property
    def policy(self) -> dict[str, Any]:
        """The provider's fields that decide what the actor allows: the grant a step needs,
        which preconditions attach (the class), how long a call may run, and which facts its
        result gives those preconditions (only when declared: a tool that provides none keeps
        the pin it had before tools could provide facts)."""
        policy: dict[str, Any] = {"permission": self.permission, "blast_radius": self.blast_radius,
                                  "reversibility": self.reversibility, "timeout_s": self.timeout_s}
        if self.provides is not None:
            policy["provides"] = msgspec.structs.asdict(self.provides)
        return policy

    @functools.cached_property  # a Tool never changes; a changed catalog file makes new ones
    def pin(self) -> str:
        """sha256 over what a caller relies on: identity, description, schema and policy."""
        schema = {name: msgspec.structs.asdict(arg) for name, arg in sorted(self.args.items())}
        canonical = msgspec.json.encode({"server": self.server, "tool": self.tool,
                                         "description": self.description, "args": schema,
                                         "policy": self.policy})
        return hashlib.sha256(canonical).hexdigest()


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
        if tool.provides is not None and tool.provides.lineage in ACTOR_LINEAGES:
            raise CatalogError(f"catalog {path}: {tool.server}/{tool.tool} provides facts of lineage "
                               f"{tool.provides.lineage!r}, which only the actor's own facts have")
        catalog[tool.pair] = tool
    return catalog
