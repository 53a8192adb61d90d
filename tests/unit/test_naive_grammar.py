"""The naive agent's GBNF grammar: every catalog tool admitted, every admitted string parsed back.

The strings are drawn from the grammar's own text by a small GBNF sampler (the subset
grammar.py writes: literals, classes, groups, alternatives, ?, and {m,n}), so the test reads
what llama.cpp's server is sent, not a second copy of how it was built.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from actor import catalog as catalog_module
from actor.catalog import Catalog, Tool
from redteam.naive import grammar
from redteam.naive.parse import parse, resolve

CATALOG = catalog_module.load()
TOKEN = re.compile(r'\s*(?:(?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[a-z0-9-]+)'
                   r"|(?P<rep>\{\d+,\d+\})|(?P<op>[()|?]))")


def rules(text: str) -> dict[str, list[str]]:
    """Rule name -> its body as tokens."""
    table = {}
    for line in text.strip().splitlines():
        name, body = line.split(" ::= ", 1)
        tokens, at = [], 0
        while at < len(body):
            m = TOKEN.match(body, at)
            assert m is not None, f"unexpected GBNF at {body[at:]!r}"
            tokens.append(m.group(m.lastgroup or ""))
            at = m.end()
        table[name] = tokens
    return table


def literal(token: str) -> str:
    return token[1:-1].encode().decode("unicode_escape")


def char_class(token: str) -> list[str]:
    body, chars, at = token[1:-1], [], 0
    while at < len(body):
        if at + 2 < len(body) and body[at + 1] == "-":
            chars += [chr(c) for c in range(ord(body[at]), ord(body[at + 2]) + 1)]
            at += 3
        else:
            chars.append(body[at])
            at += 1
    return chars


class Sampler:
    """Draws one string a GBNF rule admits; `choose(n)` picks among n options."""

    def __init__(self, table: dict[str, list[str]], choose: Any) -> None:
        self.table, self.choose = table, choose

    def rule(self, name: str) -> str:
        return self.sequence(self.table[name])

    def sequence(self, tokens: list[str]) -> str:
        branches: list[list[str]] = []
        current: list[str] = []
        depth = 0
        for token in tokens:  # split on top-level |
            depth += token == "("
            depth -= token == ")"
            if token == "|" and depth == 0:
                branches.append(current)
                current = []
            else:
                current.append(token)
        branches.append(current)
        return self.items(branches[self.choose(len(branches))])

    def items(self, tokens: list[str]) -> str:
        out, at = [], 0
        while at < len(tokens):
            token = tokens[at]
            if token == "(":
                depth, end = 1, at + 1
                while depth:
                    depth += {"(": 1, ")": -1}.get(tokens[end], 0)
                    end += 1
                unit: Any = tokens[at + 1:end - 1]
                at = end
            else:
                unit, at = token, at + 1
            low, high = 1, 1
            if at < len(tokens) and tokens[at] == "?":
                low, high, at = 0, 1, at + 1
            elif at < len(tokens) and tokens[at].startswith("{"):
                low, high = map(int, tokens[at][1:-1].split(","))
                at += 1
            out += [self.unit(unit) for _ in range(low + self.choose(high - low + 1))]
        return "".join(out)

    def unit(self, unit: Any) -> str:
        if isinstance(unit, list):
            return self.sequence(unit)
        if unit.startswith('"'):
            return literal(unit)
        if unit.startswith("["):
            chars = char_class(unit)
            return chars[self.choose(len(chars))]
        return self.rule(unit)


def calls_in(text: str, catalog: Catalog) -> list[tuple[tuple[str, str] | None, dict[str, Any]]]:
    return [(resolve(p.name, catalog), p.args) for p in parse(text)]


def spelled(text: str) -> list[tuple[tuple[str, str], dict[str, str]]]:
    """The calls a grammar line spells, read without parse.py: name(k=v, k=v)."""
    found = []
    for line in text.split("\n"):
        name, inner = line[:-1].split("(", 1)
        server, tool = name.split("/")
        found.append(((server, tool), dict(pair.split("=", 1) for pair in inner.split(", ")) if inner else {}))
    return found


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_string_the_grammar_admits_parses_back(data: st.DataObject) -> None:
    """A drawn answer parses into exactly the calls it spells, each a catalog tool."""
    sampler = Sampler(rules(grammar.gbnf(CATALOG)),
                      lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0)
    text = sampler.rule("root")
    expected = spelled(text)
    assert 1 <= len(expected) <= grammar.MAX_CALLS
    assert calls_in(text, CATALOG) == expected
    assert all(pair in CATALOG and set(args) == set(CATALOG[pair].args) for pair, args in expected)


def every_call(text: str) -> set[tuple[str, str]]:
    """Each tool rule of the grammar, drawn once with the first option everywhere else."""
    table = rules(text)
    tools = [name for name in table if name.startswith("tool")]
    return {spelled(Sampler(table, lambda n: 0).rule(name))[0][0] for name in tools}


def test_every_catalog_tool_is_admitted() -> None:
    """Each tool of the shipped catalog has its call in the grammar, by its full pair."""
    assert every_call(grammar.gbnf(CATALOG)) == set(CATALOG)


def tool(server: str, name: str, args: dict[str, dict[str, Any]]) -> Tool:
    import msgspec

    return msgspec.convert({"server": server, "tool": name, "description": "d", "permission": "read",
                            "blast_radius": "internal", "reversibility": "reversible", "args": args}, Tool)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_typed_and_several_arguments_parse_back(data: st.DataObject) -> None:
    """Ints, floats, bools and two arguments in one call: each parses back by name."""
    catalog = {t.pair: t for t in [
        tool("calc", "add", {"a": {"type": "int"}, "b": {"type": "float"}}),
        tool("flags", "set_flag", {"on": {"type": "bool"}, "label": {"type": "str", "max_length": 3}}),
    ]}
    sampler = Sampler(rules(grammar.gbnf(catalog)), lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0)
    text = sampler.rule("root")
    assert calls_in(text, catalog) == spelled(text)
    assert all(len(args.get("label", "")) <= 3 for _, args in spelled(text))


def test_a_name_no_call_line_can_spell_is_left_out() -> None:
    """A tool whose name parse.py could not read back is not offered to the model."""
    catalog = {t.pair: t for t in [tool("shop", "lookup_order", {}), tool("shop", "bad name", {})]}
    assert every_call(grammar.gbnf(catalog)) == {("shop", "lookup_order")}
    with pytest.raises(ValueError, match="no tool"):
        grammar.gbnf({t.pair: t for t in [tool("shop", "bad name", {})]})


def test_request_fields_carry_the_grammar_and_room_for_three_calls() -> None:
    """The request gets the grammar and a token budget beyond the reader's one short value."""
    fields = grammar.request_fields(CATALOG)
    assert fields["grammar"] == grammar.gbnf(CATALOG)
    assert fields["max_tokens"] >= 3 * 32
