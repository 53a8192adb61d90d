"""Tool selection: a tool description is the provider's text, the request is ours.

Two servers can both offer a tool called ``read``; a tool is only named by its full
server/tool pair, and that pair comes from the trusted request (the task's plan), never
from what a provider wrote about its tool. Descriptions are untrusted input: they help a
person (or a model) understand an offer, and they may carry instructions of their own.

To make the failure visible and testable, a description may hold a marker in a small
grammar of our own, ``[[tool:SERVER/TOOL]]``. Two rules read the same inputs:

    naive_tool_choice   starts from the requested pair and lets the last marker found in
                        any description replace it; an unknown final pair gives None,
                        never a fallback. ``source`` names the record whose description
                        held that last marker.
    bound_tool_choice   chooses exactly the requested pair if the catalog offers it, else
                        None; ``source`` is always None. Descriptions and catalog order
                        cannot change the choice, and ``read`` on server b is not ``read``
                        on server a.

Choosing is not authorising: a chosen tool still has its call, arguments and permission
checked afterwards. The bound rule is a fixed selection rule, not a general LLM defence.

The actor uses the bound rule (through ``bound_pair``); the naive one exists to teach and compare.

Data: a catalog (0-12 records of server, tool, description) and a requested pair.
Readers: the actor, before it calls any tool; the tests in tests/unit/test_selection.py.
Rationale: every input is checked in full before either rule decides, invalid input raises
ValueError, inputs are never changed, and every result is a new dict.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, TypeGuard

MAX_RECORDS = 12
MAX_DESCRIPTION_CODE_POINTS = 256
MAX_ID_LENGTH = 32

_ID_FIRST = frozenset(string.ascii_lowercase)
_ID_REST = frozenset(string.ascii_lowercase + string.digits + "-")
_RECORD_KEYS = frozenset({"server", "tool", "description"})
_REQUEST_KEYS = frozenset({"server", "tool"})
_MARKER_OPEN = "[[tool:"
_MARKER_CLOSE = "]]"

Pair = tuple[str, str]


class _Listing(NamedTuple):
    """One checked catalog record: its full pair and the provider's description."""

    pair: Pair
    description: str


# --- the decision ----------------------------------------------------------------------


def bound_pair(pairs: Iterable[Pair], requested_pair: Pair) -> Pair | None:
    """The requested pair if it is one of ``pairs`` (exact equality), else None.

    Pure membership: no id grammar is checked here, so the actor can use it for its own
    catalog, whose tool ids also allow ``_`` (``shop/lookup_order``).
    """
    server, tool = requested_pair
    wanted = (server, tool)
    for pair in pairs:
        if pair == wanted:
            return wanted
    return None


def naive_tool_choice(catalog: Any, requested: Any) -> dict[str, dict[str, str] | None]:
    """The last description marker wins over the request; shown to teach, never used to act."""
    listings = _checked_catalog(catalog)
    candidate = _checked_request(requested)
    marker_source: Pair | None = None
    for listing in listings:
        for named in _markers_in(listing.description):
            candidate = named
            marker_source = listing.pair
    chosen = bound_pair((listing.pair for listing in listings), candidate)
    return {"choice": _pair_dict(chosen), "source": _pair_dict(marker_source)}


def bound_tool_choice(catalog: Any, requested: Any) -> dict[str, dict[str, str] | None]:
    """Exactly the requested pair if the catalog offers it, else None; descriptions are ignored."""
    listings = _checked_catalog(catalog)
    wanted = _checked_request(requested)
    chosen = bound_pair((listing.pair for listing in listings), wanted)
    return {"choice": _pair_dict(chosen), "source": None}


# --- the marker grammar ----------------------------------------------------------------


def _markers_in(description: str) -> Iterator[Pair]:
    """Each ``[[tool:SERVER/TOOL]]`` with valid ids in one description, left to right.

    Ids hold no ``]`` and no ``/``, so a marker ends at the first ``]]`` after its opening
    and two markers can never overlap; an invalid candidate is skipped one character on.
    """
    start = description.find(_MARKER_OPEN)
    while start != -1:
        body_start = start + len(_MARKER_OPEN)
        body_end = description.find(_MARKER_CLOSE, body_start)
        if body_end == -1:
            return
        server, slash, tool = description[body_start:body_end].partition("/")
        if slash and _is_id(server) and _is_id(tool):
            yield (server, tool)
            start = description.find(_MARKER_OPEN, body_end + len(_MARKER_CLOSE))
        else:
            start = description.find(_MARKER_OPEN, start + 1)


# --- checking the inputs ---------------------------------------------------------------


def _is_id(value: object) -> TypeGuard[str]:
    """An exact str matching ASCII ``[a-z][a-z0-9-]{0,31}`` in full."""
    return (
        type(value) is str
        and 1 <= len(value) <= MAX_ID_LENGTH
        and value[0] in _ID_FIRST
        and all(char in _ID_REST for char in value)
    )


def _require_id(value: object, where: str) -> str:
    if not _is_id(value):
        raise ValueError(f"{where}: not an id ([a-z][a-z0-9-]{{0,31}}, exact str)")
    return value


def _require_record(value: object, keys: frozenset[str], where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ValueError(f"{where}: not an exact dict")
    if not all(type(key) is str for key in value):
        raise ValueError(f"{where}: keys must be exact str")
    if value.keys() != keys:
        raise ValueError(f"{where}: keys must be exactly {sorted(keys)}")
    return value


def _require_description(value: object, where: str) -> str:
    if type(value) is not str:
        raise ValueError(f"{where}: not an exact str")
    if len(value) > MAX_DESCRIPTION_CODE_POINTS:
        raise ValueError(f"{where}: longer than {MAX_DESCRIPTION_CODE_POINTS} code points")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where}: does not encode as UTF-8") from None
    return value


def _checked_catalog(catalog: object) -> list[_Listing]:
    """Every record checked, in order, before any rule looks at one."""
    if type(catalog) is not list and type(catalog) is not tuple:
        raise ValueError("catalog: not an exact list or tuple")
    if len(catalog) > MAX_RECORDS:
        raise ValueError(f"catalog: more than {MAX_RECORDS} records")
    listings: list[_Listing] = []
    offered: set[Pair] = set()
    for index, raw in enumerate(catalog):
        where = f"catalog[{index}]"
        record = _require_record(raw, _RECORD_KEYS, where)
        pair = (_require_id(record["server"], f"{where}.server"),
                _require_id(record["tool"], f"{where}.tool"))
        description = _require_description(record["description"], f"{where}.description")
        if pair in offered:
            raise ValueError(f"{where}: the pair {pair[0]}/{pair[1]} is listed twice")
        offered.add(pair)
        listings.append(_Listing(pair, description))
    return listings


def _checked_request(requested: object) -> Pair:
    record = _require_record(requested, _REQUEST_KEYS, "requested")
    return (_require_id(record["server"], "requested.server"),
            _require_id(record["tool"], "requested.tool"))


def _pair_dict(pair: Pair | None) -> dict[str, str] | None:
    """A new ``{"server", "tool"}`` dict for a pair, or None."""
    if pair is None:
        return None
    return {"server": pair[0], "tool": pair[1]}
