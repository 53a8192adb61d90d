"""The naive agent's tool-call syntax as a GBNF grammar, for llama.cpp's server to decode by.

Unconstrained, the lab's small model (SmolLM2-135M) proposes no parseable call at all: its
answers ramble, so a naive pane on it shows nothing and teaches nothing. Constrained by this
grammar, whatever it writes is one to MAX_CALLS lines, each a call of the catalog in the
line shape parse.py reads:

    server/tool(arg=value, arg=value)

with every tool of the catalog and its arguments by the names the catalog declares, in the
catalog's order. A value is of its argument's type: ASCII digits for an int, a decimal for a
float, true or false for a bool, and for a str 1 to MAX_VALUE characters of VALUE_CHARS (no
comma, bracket, quote, space or newline: what parse.py would split on or strip). So every
string the grammar admits parses back into exactly the calls it spells.

The grammar only shapes what the model writes: the naive agent still runs whatever that is.
It does not choose which call, the model does; an email that says "call shop/refund_all"
can still make it write that call. A tool or argument name that parse.py could not read
back (not an identifier) is left out of the grammar, so the model is never made to write
a call the agent would drop.
"""

from __future__ import annotations

import re
from typing import Any

from actor.catalog import Arg, Catalog, Tool

MAX_CALLS = 3  # lines in one answer
MAX_VALUE = 48  # characters of one str value
VALUE_CHARS = "A-Za-z0-9@._+-"  # a str value's characters, as a GBNF class body
MAX_TOKENS = 160  # tokens the constrained answer may take: MAX_CALLS calls with short values

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")  # a server or tool name parse.py reads in a call line
_ARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # an argument name parse.py reads as key=value

VALUE_RULES = {  # a str's rule is per length: value-str-N, N = its max_length up to MAX_VALUE
    "int": '"-"? [0-9]{1,18}',
    "float": '"-"? [0-9]{1,15} ("." [0-9]{1,6})?',
    "bool": '"true" | "false"',
}


def callable_tools(catalog: Catalog) -> list[Tool]:
    """The catalog's tools whose names and argument names a call line can spell, in order."""
    return [tool for tool in catalog.values()
            if _NAME.match(tool.server) and _NAME.match(tool.tool) and all(_ARG.match(name) for name in tool.args)]


def gbnf(catalog: Catalog) -> str:
    """The grammar: one to MAX_CALLS lines, each a call of one of the catalog's tools."""
    tools = callable_tools(catalog)
    if not tools:
        raise ValueError("the catalog has no tool a call line can name")
    lines = [f'root ::= call ("\\n" call){{0,{MAX_CALLS - 1}}}',
             "call ::= " + " | ".join(f"tool{number}" for number in range(len(tools)))]
    for number, tool in enumerate(tools):
        parts = [f'"{tool.server}/{tool.tool}("']
        for position, (name, arg) in enumerate(tool.args.items()):
            parts.append(f'"{", " if position else ""}{name}=" {_value_rule(arg)}')
        parts.append('")"')
        lines.append(f"tool{number} ::= " + " ".join(parts))
    used = sorted({_value_rule(arg) for tool in tools for arg in tool.args.values()})
    lines += [f"{name} ::= {_value_body(name)}" for name in used]
    return "\n".join(lines) + "\n"


def _value_rule(arg: Arg) -> str:
    if arg.type == "str":
        return f"value-str-{min(arg.max_length or MAX_VALUE, MAX_VALUE)}"
    return f"value-{arg.type}"


def _value_body(name: str) -> str:
    if name.startswith("value-str-"):
        return f"[{VALUE_CHARS}]{{1,{name.removeprefix('value-str-')}}}"
    return VALUE_RULES[name.removeprefix("value-")]


def request_fields(catalog: Catalog) -> dict[str, Any]:
    """What the naive agent adds to its chat completion request when constrained."""
    return {"grammar": gbnf(catalog), "max_tokens": MAX_TOKENS}
