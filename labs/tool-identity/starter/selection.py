"""Tool selection by the full server/tool pair (lab `tool-identity`, seed 000).

Write the two decisions; the helpers below already check every input (ValueError on
invalid input) and make new dicts. The full contract is in the lab's README.md
(README.nl.md: the seed's own words). Each function is graded on its own, so you can
check one while the other is still a TODO:

    airlock lab check tool-identity --dir <this folder>
"""

import re


def naive_tool_choice(catalog, requested):
    """Start from the requested pair; the last [[tool:...]] marker in any description
    replaces it. Return {"choice": pair dict if the catalog offers it else None,
    "source": pair dict of the record whose description held the last marker, or None}."""
    raise NotImplementedError("TODO: naive_tool_choice")


def bound_tool_choice(catalog, requested):
    """Exactly the requested pair if the catalog offers it, else None; source is always
    None. Descriptions and catalog order never change the choice."""
    raise NotImplementedError("TODO: bound_tool_choice")


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
