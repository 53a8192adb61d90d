"""Wrong on purpose: the result's keys come as source, choice."""

import random
import re


def naive_tool_choice(catalog, requested):
    rows = _catalog(catalog)
    candidate = _request(requested)
    source = None
    for pair, description in rows:
        for marker in _markers(description):
            candidate = marker
            source = pair
    offered = {pair for pair, _ in rows}
    return {"source": _pair_dict(source), "choice": _pair_dict(candidate if candidate in offered else None)}


def bound_tool_choice(catalog, requested):
    rows = _catalog(catalog)
    wanted = _request(requested)
    offered = any(pair == wanted for pair, _ in rows)
    return {"choice": _pair_dict(wanted if offered else None), "source": None}


# --- given helpers: they check every input and raise ValueError; you need not change them ---

_ID = re.compile(r"[a-z][a-z0-9-]{0,31}", re.ASCII)
_MARKER = re.compile(r"\[\[tool:([a-z][a-z0-9-]{0,31})/([a-z][a-z0-9-]{0,31})\]\]", re.ASCII)


def _record(value, keys):
    if type(value) is not dict or any(type(key) is not str for key in value) or set(value) != set(keys):
        raise ValueError(f"record: not an exact dict with keys {sorted(keys)}")
    return value


def _id(value):
    if type(value) is not str or _ID.fullmatch(value) is None:
        raise ValueError("id: not an exact str matching [a-z][a-z0-9-]{0,31}")
    return value


def _text(value):
    if type(value) is not str or len(value) > 256:
        raise ValueError("description: not an exact str of at most 256 code points")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("description: does not encode as UTF-8") from None
    return value


def _request(value):
    """The requested (server, tool) pair, checked."""
    _record(value, ("server", "tool"))
    return (_id(value["server"]), _id(value["tool"]))


def _catalog(value):
    """Every record checked, in order: a list of ((server, tool), description)."""
    if type(value) not in (list, tuple) or len(value) > 12:
        raise ValueError("catalog: not an exact list or tuple of at most 12 records")
    result = []
    seen = set()
    for row in value:
        _record(row, ("server", "tool", "description"))
        pair = (_id(row["server"]), _id(row["tool"]))
        description = _text(row["description"])
        if pair in seen:
            raise ValueError(f"catalog: the pair {pair[0]}/{pair[1]} is listed twice")
        seen.add(pair)
        result.append((pair, description))
    return result


def _markers(description):
    """Each [[tool:server/tool]] marker in one description, left to right, as pairs."""
    return [(found.group(1), found.group(2)) for found in _MARKER.finditer(description)]


def _pair_dict(pair):
    """A new {"server": ..., "tool": ...} dict for a pair, or None for None."""
    return None if pair is None else {"server": pair[0], "tool": pair[1]}
