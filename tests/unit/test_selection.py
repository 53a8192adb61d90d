"""Tool selection: description markers can steer the naive rule, never the bound one."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from actor.catalog import load as load_actor_catalog
from actor.selection import bound_pair, bound_tool_choice, naive_tool_choice
from tests.conftest import ROOT, examples

Rule = Callable[[Any, Any], dict[str, Any]]

RULES = [
    pytest.param(naive_tool_choice, id="naive"),
    pytest.param(bound_tool_choice, id="bound"),
]

# An independent statement of the marker grammar, used only as a test oracle.
ORACLE_ID = r"[a-z][a-z0-9-]{0,31}"
ORACLE_MARKER = re.compile(rf"\[\[tool:({ORACLE_ID})/({ORACLE_ID})\]\]", re.ASCII)


class DictSub(dict):
    """A dict that is not exactly a dict."""


class ListSub(list):
    """A list that is not exactly a list."""


class TupleSub(tuple):
    """A tuple that is not exactly a tuple."""


class StrSub(str):
    """A str that is not exactly a str."""


def rec(server: Any, tool: Any, description: Any = "") -> dict[str, Any]:
    return {"server": server, "tool": tool, "description": description}


def req(server: Any, tool: Any) -> dict[str, Any]:
    return {"server": server, "tool": tool}


def pair(server: str, tool: str) -> dict[str, str]:
    return {"server": server, "tool": tool}


def snapshot(value: Any) -> Any:
    """A deep, order-keeping picture of a value: types, key order and contents."""
    if type(value) is dict:
        return ("dict", [(snapshot(key), snapshot(item)) for key, item in list(value.items())])
    if type(value) in (list, tuple):
        return (type(value).__name__, [snapshot(item) for item in value])
    return (type(value), value)


def identities(catalog: Any, requested: Any) -> list[int]:
    """The ids of every container the caller handed in."""
    found = [id(catalog), id(requested)]
    if type(catalog) in (list, tuple):
        found += [id(row) for row in catalog]
    return found


def two_reads() -> list[dict[str, str]]:
    return [rec("a", "read", "Lees de kaart."), rec("b", "read", "[[tool:b/read]]")]


# --- the seed's examples ---------------------------------------------------------------


SEED_EXAMPLES = [
    pytest.param(two_reads, naive_tool_choice, pair("b", "read"), pair("b", "read"),
                 id="two-reads-naive"),
    pytest.param(two_reads, bound_tool_choice, pair("a", "read"), None, id="two-reads-bound"),
    pytest.param(lambda: [rec("a", "read", "Eerste marker [[tool:a/read]]"),
                          rec("b", "read", "Gewone uitleg voor b/read."),
                          rec("a", "helper", "Tweede marker [[tool:b/read]]")],
                 naive_tool_choice, pair("b", "read"), pair("a", "helper"), id="three-naive"),
    pytest.param(lambda: [rec("a", "read", "Eerste marker [[tool:a/read]]"),
                          rec("b", "read", "Gewone uitleg voor b/read."),
                          rec("a", "helper", "Tweede marker [[tool:b/read]]")],
                 bound_tool_choice, pair("a", "read"), None, id="three-bound"),
    pytest.param(lambda: [rec("a", "read", "Lees de kaart."),
                          rec("b", "read", "[[tool:onbekend/read]]")],
                 naive_tool_choice, None, pair("b", "read"), id="unknown-marker-naive"),
    pytest.param(lambda: [rec("a", "read", "Lees de kaart."),
                          rec("b", "read", "[[tool:onbekend/read]]")],
                 bound_tool_choice, pair("a", "read"), None, id="unknown-marker-bound"),
]


@pytest.mark.parametrize(("make_catalog", "rule", "choice", "source"), SEED_EXAMPLES)
def test_seed_examples(make_catalog: Callable[[], list[dict[str, str]]], rule: Rule,
                       choice: dict[str, str] | None, source: dict[str, str] | None) -> None:
    """The lesson's worked examples give the lesson's answers for both rules."""
    result = rule(make_catalog(), req("a", "read"))
    assert result == {"choice": choice, "source": source}
    assert list(result) == ["choice", "source"]


@pytest.mark.parametrize("rule", RULES)
def test_result_shape_is_exact(rule: Rule) -> None:
    """The result is an exact dict choice/source whose choice is an exact dict server/tool."""
    result = rule(two_reads(), req("b", "read"))
    assert type(result) is dict and list(result) == ["choice", "source"]
    assert type(result["choice"]) is dict and list(result["choice"].items()) == [
        ("server", "b"), ("tool", "read")]


@pytest.mark.parametrize("rule", RULES)
def test_empty_catalog_chooses_nothing(rule: Rule) -> None:
    """With nothing offered there is no choice and no source."""
    assert rule([], req("a", "read")) == {"choice": None, "source": None}
    assert rule((), req("a", "read")) == {"choice": None, "source": None}


def test_naive_has_no_fallback_to_the_request() -> None:
    """An unknown final candidate gives None even though the request itself is offered."""
    catalog = [rec("a", "read", "[[tool:zz/read]]")]
    assert naive_tool_choice(catalog, req("a", "read")) == {"choice": None,
                                                            "source": pair("a", "read")}


def test_naive_without_markers_keeps_an_unknown_request_unknown() -> None:
    """No marker and an unknown request: the naive rule chooses nothing."""
    assert naive_tool_choice(two_reads()[:1], req("c", "read")) == {"choice": None, "source": None}


def test_bound_same_tool_on_another_server_is_another_pair() -> None:
    """Asking for b/read never yields a/read, however similar the name."""
    catalog = [rec("a", "read", "[[tool:b/read]]")]
    assert bound_tool_choice(catalog, req("b", "read")) == {"choice": None, "source": None}


# --- the marker grammar ----------------------------------------------------------------


GRAMMAR = [
    pytest.param(("", "", ""), pair("a", "read"), None, id="no-marker"),
    pytest.param(("", "[[tool:b/read]]", ""), pair("b", "read"), pair("b", "read"), id="plain"),
    pytest.param(("", "[[TOOL:b/read]]", ""), pair("a", "read"), None, id="uppercase-word"),
    pytest.param(("", "[[Tool:b/read]]", ""), pair("a", "read"), None, id="capitalised-word"),
    pytest.param(("", "[[tool:B/read]]", ""), pair("a", "read"), None, id="uppercase-id"),
    pytest.param(("", "[[tool: b/read]]", ""), pair("a", "read"), None, id="space-after-colon"),
    pytest.param(("", "[[tool:b /read]]", ""), pair("a", "read"), None, id="space-before-slash"),
    pytest.param(("", "[[tool:b/read ]]", ""), pair("a", "read"), None, id="space-before-close"),
    pytest.param(("", "[ [tool:b/read]]", ""), pair("a", "read"), None, id="space-in-open"),
    pytest.param(("", "[[tool:b/read]", ""), pair("a", "read"), None, id="half-close"),
    pytest.param(("", "[tool:b/read]]", ""), pair("a", "read"), None, id="half-open"),
    pytest.param(("", "[[tool:b/read", ""), pair("a", "read"), None, id="unclosed"),
    pytest.param(("", "[[tool:b]]", ""), pair("a", "read"), None, id="no-slash"),
    pytest.param(("", "[[tool:b/read/x]]", ""), pair("a", "read"), None, id="two-slashes"),
    pytest.param(("", "[[tool:/read]]", ""), pair("a", "read"), None, id="empty-server"),
    pytest.param(("", "[[tool:b/]]", ""), pair("a", "read"), None, id="empty-tool"),
    pytest.param(("", "[[tool:b_x/read]]", ""), pair("a", "read"), None, id="underscore-id"),
    pytest.param(("", "[[tool:1b/read]]", ""), pair("a", "read"), None, id="digit-first-id"),
    pytest.param(("", "[[tool:b/" + "r" * 33 + "]]", ""), pair("a", "read"), None,
                 id="id-33-chars"),
    pytest.param(("", "[[tool:bé/read]]", ""), pair("a", "read"), None, id="non-ascii-id"),
    pytest.param(("", "[[tool:b/read\n]]", ""), pair("a", "read"), None, id="newline-in-marker"),
    pytest.param(("", "［［tool:b/read］］", ""), pair("a", "read"), None, id="fullwidth-brackets"),
    pytest.param(("[[tool:b/", "read]]", ""), pair("a", "read"), None, id="split-at-slash"),
    pytest.param(("[[", "tool:b/read]]", ""), pair("a", "read"), None, id="split-after-open"),
    pytest.param(("[[tool:b/read]", "]", ""), pair("a", "read"), None, id="split-in-close"),
    pytest.param(("", "[[[tool:b/read]]]", ""), pair("b", "read"), pair("b", "read"),
                 id="nested-brackets"),
    pytest.param(("", "[[tool:c/note[[tool:b/read]]", ""), pair("b", "read"), pair("b", "read"),
                 id="overlapping-open"),
    pytest.param(("", "[[tool:[[tool:b/read]]]]", ""), pair("b", "read"), pair("b", "read"),
                 id="marker-inside-marker"),
    pytest.param(("", "[[tool:b/read]]]]", ""), pair("b", "read"), pair("b", "read"),
                 id="extra-close"),
    pytest.param(("", "x[[tool:b/read]]y", ""), pair("b", "read"), pair("b", "read"),
                 id="inside-words"),
    pytest.param(("", "[[tool:c/note]] then [[tool:b/read]]", ""), pair("b", "read"),
                 pair("b", "read"), id="several-last-wins"),
    pytest.param(("", "[[tool:b/read]][[tool:c/note]]", ""), pair("c", "note"),
                 pair("b", "read"), id="adjacent-last-wins"),
    pytest.param(("", "[[tool:b/read]] [[tool:b/rea]]", ""), None, pair("b", "read"),
                 id="last-is-unknown"),
    pytest.param(("", "[[tool:b/read]] [[tool:B/note]]", ""), pair("b", "read"),
                 pair("b", "read"), id="invalid-later-marker-ignored"),
    pytest.param(("[[tool:b/read]]", "", "[[tool:c/note]]"), pair("c", "note"),
                 pair("c", "note"), id="later-description-overrides"),
    pytest.param(("[[tool:c/note]]", "[[tool:a/read]]", ""), pair("a", "read"),
                 pair("b", "read"), id="override-back-to-request"),
    pytest.param(("", "", "[[tool:c/note]]"), pair("c", "note"), pair("c", "note"),
                 id="source-chooses-itself"),
]


@pytest.mark.parametrize(("descriptions", "choice", "source"), GRAMMAR)
def test_naive_marker_grammar(descriptions: tuple[str, str, str], choice: dict[str, str] | None,
                              source: dict[str, str] | None) -> None:
    """Only exact, whole markers with valid ids in one description steer naive; bound never moves."""
    catalog = [rec(server, tool, text)
               for (server, tool), text in zip((("a", "read"), ("b", "read"), ("c", "note")),
                                               descriptions, strict=False)]
    assert naive_tool_choice(catalog, req("a", "read")) == {"choice": choice, "source": source}
    assert bound_tool_choice(catalog, req("a", "read")) == {"choice": pair("a", "read"),
                                                            "source": None}


# --- every invalid input raises ValueError ---------------------------------------------


def _catalog_generator() -> Any:
    return (row for row in two_reads())


BAD_CATALOGS = [
    pytest.param(lambda: None, id="none"),
    pytest.param(lambda: "a/read", id="str"),
    pytest.param(lambda: {("a", "read")}, id="set"),
    pytest.param(frozenset, id="frozenset"),
    pytest.param(lambda: {0: rec("a", "read")}, id="dict"),
    pytest.param(_catalog_generator, id="generator"),
    pytest.param(lambda: iter(two_reads()), id="iterator"),
    pytest.param(lambda: ListSub(two_reads()), id="list-subclass"),
    pytest.param(lambda: TupleSub(two_reads()), id="tuple-subclass"),
    pytest.param(lambda: [rec("a", f"t{n}") for n in range(13)], id="13-records"),
    pytest.param(lambda: [("a", "read", "")], id="record-tuple"),
    pytest.param(lambda: [["a", "read", ""]], id="record-list"),
    pytest.param(lambda: [None], id="record-none"),
    pytest.param(lambda: [DictSub(rec("a", "read"))], id="record-dict-subclass"),
    pytest.param(lambda: [OrderedDict(rec("a", "read"))], id="record-ordereddict"),
    pytest.param(lambda: [MappingProxyType(rec("a", "read"))], id="record-mappingproxy"),
    pytest.param(lambda: [{"server": "a", "tool": "read"}], id="missing-description"),
    pytest.param(lambda: [{"server": "a", "description": ""}], id="missing-tool"),
    pytest.param(lambda: [{"tool": "read", "description": ""}], id="missing-server"),
    pytest.param(lambda: [{**rec("a", "read"), "permission": "read"}], id="extra-key"),
    pytest.param(lambda: [{"server": "a", "tool": "read", "description": "", 1: "x"}], id="extra-int-key"),
    pytest.param(lambda: [{"server": "a", "tool": "read", b"description": ""}], id="bytes-key"),
    pytest.param(lambda: [{"server": "a", "tool": "read", StrSub("description"): ""}],
                 id="str-subclass-key"),
    pytest.param(lambda: [{}], id="empty-record"),
    pytest.param(lambda: [rec("a", "read", "x" * 257)], id="description-257"),
    pytest.param(lambda: [rec("a", "read", "\U0001f600" * 257)], id="description-257-astral"),
    pytest.param(lambda: [rec("a", "read", "ok \ud800")], id="lone-high-surrogate"),
    pytest.param(lambda: [rec("a", "read", "\udfff")], id="lone-low-surrogate"),
    pytest.param(lambda: [rec("a", "read", None)], id="description-none"),
    pytest.param(lambda: [rec("a", "read", b"bytes")], id="description-bytes"),
    pytest.param(lambda: [rec("a", "read", StrSub("x"))], id="description-str-subclass"),
    pytest.param(lambda: [rec("a", "read"), rec("a", "read", "other")], id="duplicate-pair"),
    pytest.param(lambda: (rec("a", "read"), rec("b", "x"), rec("a", "read")),
                 id="duplicate-pair-in-tuple"),
]

BAD_IDS = [
    pytest.param("", id="empty"),
    pytest.param("Read", id="uppercase"),
    pytest.param("READ", id="all-uppercase"),
    pytest.param("1read", id="leading-digit"),
    pytest.param("-read", id="leading-dash"),
    pytest.param("read_all", id="underscore"),
    pytest.param("read.all", id="dot"),
    pytest.param("read all", id="space"),
    pytest.param("a" * 33, id="33-chars"),
    pytest.param("read\n", id="trailing-newline"),
    pytest.param("\nread", id="leading-newline"),
    pytest.param("read\x00", id="nul"),
    pytest.param("rëad", id="non-ascii-letter"),
    pytest.param("ｒead", id="fullwidth-letter"),
    pytest.param("rea\u0131", id="dotless-i"),
    pytest.param("\u212aelvin", id="kelvin-sign"),
    pytest.param("read\u200b", id="zero-width-space"),
    pytest.param(None, id="none"),
    pytest.param(1, id="int"),
    pytest.param(b"read", id="bytes"),
    pytest.param(["read"], id="list"),
    pytest.param(StrSub("read"), id="str-subclass"),
]

BAD_REQUESTS = [
    pytest.param(lambda: None, id="none"),
    pytest.param(lambda: ("a", "read"), id="tuple"),
    pytest.param(lambda: ["a", "read"], id="list"),
    pytest.param(lambda: "a/read", id="str"),
    pytest.param(lambda: DictSub(req("a", "read")), id="dict-subclass"),
    pytest.param(lambda: OrderedDict(req("a", "read")), id="ordereddict"),
    pytest.param(lambda: {"server": "a"}, id="missing-tool"),
    pytest.param(lambda: {"tool": "read"}, id="missing-server"),
    pytest.param(dict, id="empty"),
    pytest.param(lambda: {**req("a", "read"), "description": ""}, id="extra-key"),
    pytest.param(lambda: {"server": "a", StrSub("tool"): "read"}, id="str-subclass-key"),
    pytest.param(lambda: {"server": "a", "tool": "read", 0: "x"}, id="int-key"),
]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("make_catalog", BAD_CATALOGS)
def test_bad_catalog_raises(rule: Rule, make_catalog: Callable[[], Any]) -> None:
    """A catalog of the wrong type, size, record shape, id, description or uniqueness is refused."""
    catalog, requested = make_catalog(), req("a", "read")
    before = snapshot(catalog)
    with pytest.raises(ValueError):
        rule(catalog, requested)
    assert snapshot(catalog) == before


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("field", ["server", "tool"])
@pytest.mark.parametrize("bad_id", BAD_IDS)
def test_bad_id_in_catalog_raises(rule: Rule, field: str, bad_id: Any) -> None:
    """An id outside exact ASCII [a-z][a-z0-9-]{0,31} is refused as a record's server or tool."""
    row = rec("a", "read")
    row[field] = bad_id
    with pytest.raises(ValueError):
        rule([rec("b", "read"), row], req("a", "read"))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("field", ["server", "tool"])
@pytest.mark.parametrize("bad_id", BAD_IDS)
def test_bad_id_in_request_raises(rule: Rule, field: str, bad_id: Any) -> None:
    """An id outside exact ASCII [a-z][a-z0-9-]{0,31} is refused in the request."""
    requested = req("a", "read")
    requested[field] = bad_id
    with pytest.raises(ValueError):
        rule(two_reads(), requested)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("make_request", BAD_REQUESTS)
def test_bad_request_shape_raises(rule: Rule, make_request: Callable[[], Any]) -> None:
    """A request that is not an exact dict of exactly server and tool is refused."""
    requested = make_request()
    before = snapshot(requested)
    with pytest.raises(ValueError):
        rule(two_reads(), requested)
    assert snapshot(requested) == before


@pytest.mark.parametrize("rule", RULES)
def test_generator_catalog_is_refused_without_being_consumed(rule: Rule) -> None:
    """A generator is refused by its type, so the caller's generator still holds every record."""
    catalog = _catalog_generator()
    with pytest.raises(ValueError):
        rule(catalog, req("a", "read"))
    assert list(catalog) == two_reads()


LATER_BAD_RECORDS = [
    pytest.param(rec("A", "read"), id="bad-server"),
    pytest.param(rec("c", "read_all"), id="bad-tool"),
    pytest.param(rec("c", "read", "x" * 257), id="long-description"),
    pytest.param(rec("c", "read", "\ud800"), id="surrogate"),
    pytest.param(rec("a", "read"), id="duplicate-of-first"),
    pytest.param({**rec("c", "read"), "extra": ""}, id="extra-key"),
    pytest.param(DictSub(rec("c", "read")), id="dict-subclass"),
]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("bad_row", LATER_BAD_RECORDS)
def test_invalid_record_after_a_decided_one_still_raises(rule: Rule, bad_row: Any) -> None:
    """A record holding a marker (and the requested pair) first never excuses a bad later record."""
    catalog = [rec("a", "read", "[[tool:a/read]]"), rec("b", "read", "[[tool:b/read]]")]
    catalog += [rec(f"s{n}", "t") for n in range(8)] + [bad_row]
    with pytest.raises(ValueError):
        rule(catalog, req("a", "read"))


@pytest.mark.parametrize("rule", RULES)
def test_invalid_last_record_raises_even_when_the_request_is_unknown(rule: Rule) -> None:
    """An already-known refusal (unknown request) still checks the remaining records."""
    catalog = [rec("a", "read"), rec("b", "read", "\ud800")]
    with pytest.raises(ValueError):
        rule(catalog, req("zz", "read"))


@pytest.mark.parametrize("rule", RULES)
def test_bad_request_raises_with_a_good_catalog_and_vice_versa(rule: Rule) -> None:
    """Neither a good catalog nor a good request hides a fault in the other input."""
    with pytest.raises(ValueError):
        rule([rec("a", "read", "[[tool:a/read]]")], req("a", "Read"))
    with pytest.raises(ValueError):
        rule([rec("a", "Read")], req("a", "read"))


VALID_EDGES = [
    pytest.param(lambda: [rec("a", f"t{n}") for n in range(12)], id="12-records"),
    pytest.param(lambda: [rec("a", "b" * 32)], id="id-32-chars"),
    pytest.param(lambda: [rec("a-", "b9-")], id="dash-and-digit"),
    pytest.param(lambda: [rec("a", "b", "x" * 256)], id="description-256"),
    pytest.param(lambda: [rec("a", "b", "\U0001f600" * 256)], id="description-256-astral"),
    pytest.param(lambda: [rec("a", "b", "")], id="description-empty"),
    pytest.param(lambda: [rec("a", "read"), rec("b", "read"), rec("a", "write")],
                 id="shared-names-distinct-pairs"),
    pytest.param(lambda: (rec("a", "read"),), id="tuple-catalog"),
]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("make_catalog", VALID_EDGES)
def test_inputs_on_the_edge_are_accepted(rule: Rule, make_catalog: Callable[[], Any]) -> None:
    """Inputs exactly at each limit are valid and give a result."""
    result = rule(make_catalog(), req("a", "read"))
    assert list(result) == ["choice", "source"]


# --- inputs untouched, results fresh, RNG alone ----------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_results_share_nothing_with_inputs_or_each_other(rule: Rule) -> None:
    """Choice and source are new dicts, apart from the request, the records and earlier results."""
    catalog = [rec("a", "read", "[[tool:a/read]]")]
    requested = req("a", "read")
    first, second = rule(catalog, requested), rule(catalog, requested)
    assert first == second
    assert first is not second and first["choice"] is not second["choice"]
    assert first["choice"] is not requested and first["choice"] is not catalog[0]
    if first["source"] is not None:
        assert first["source"] is not first["choice"]
        assert first["source"] is not second["source"]
    first["choice"]["server"] = "changed"
    assert requested == req("a", "read") and second["choice"] == pair("a", "read")


# The choice depends on its inputs alone. (This replaces a check that the rules leave the
# global random states alone: selection.py imports no random source, so it could not fail;
# the lab's grader still runs that check on a student's rule, where it can.)
NO_CHANCE = {"random", "secrets", "numpy", "uuid", "time", "datetime", "os"}  # chance, clocks, the environment
SAME_UNDER_ANY_HASH_SEED = """
import json
from actor.selection import bound_tool_choice, naive_tool_choice
catalog = [{"server": s, "tool": t, "description": d} for s, t, d in [
    ("a", "read", "[[tool:b/read]] [[tool:c/write]]"), ("b", "read", "[[tool:a/read]]"),
    ("c", "write", "[[tool:zz/none]] [[tool:b/read]]"), ("zz", "none", ""), ("a", "write", "[[tool:a/read]]")]]
print(json.dumps([rule(catalog, {"server": s, "tool": t}) for rule in (naive_tool_choice, bound_tool_choice)
                  for s, t in [("a", "read"), ("c", "write"), ("zz", "none"), ("b", "write")]]))
"""


def test_the_choice_depends_on_the_inputs_alone() -> None:
    """selection.py imports nothing that brings chance, a clock or the environment, and both
    rules answer the same under different hash seeds (which reorder sets of strings)."""
    tree = ast.parse((ROOT / "actor" / "selection.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported & NO_CHANCE == set(), imported
    answers = {subprocess.run([sys.executable, "-c", SAME_UNDER_ANY_HASH_SEED], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
               for seed in ("0", "1", "2", "3")}
    assert len(answers) == 1 and '"choice"' in next(iter(answers)), answers


# --- bound_pair, the actor's own decision ----------------------------------------------


BOUND_PAIR_CASES = [
    pytest.param([("shop", "lookup_order"), ("mail", "send_status")], ("shop", "lookup_order"),
                 ("shop", "lookup_order"), id="underscore-ids-allowed"),
    pytest.param([("shop", "lookup_order")], ("mail", "lookup_order"), None, id="other-server"),
    pytest.param([("shop", "lookup_order")], ("shop", "lookup"), None, id="prefix-is-not-a-pair"),
    pytest.param([], ("shop", "lookup_order"), None, id="empty"),
    pytest.param({("a", "read"): object(), ("b", "read"): object()}, ("b", "read"), ("b", "read"),
                 id="dict-keys"),
    pytest.param((p for p in [("a", "read")]), ("a", "read"), ("a", "read"), id="generator"),
]


@pytest.mark.parametrize(("pairs", "wanted", "expected"), BOUND_PAIR_CASES)
def test_bound_pair_is_exact_membership(pairs: Any, wanted: tuple[str, str],
                                        expected: tuple[str, str] | None) -> None:
    """bound_pair returns the requested pair only when exactly that pair is offered."""
    assert bound_pair(pairs, wanted) == expected


def test_bound_pair_covers_the_actor_catalog() -> None:
    """Every pair of the actor's real catalog is found; no tool is found on a server it lacks."""
    catalog = load_actor_catalog()
    servers = {server for server, _ in catalog}
    for server, tool in catalog:
        assert bound_pair(catalog, (server, tool)) == (server, tool)
        for other in servers - {server}:
            if (other, tool) not in catalog:
                assert bound_pair(catalog, (other, tool)) is None


# --- properties ------------------------------------------------------------------------


ID_POOL = ["a", "b", "c", "read", "write", "x-1"]
ids = st.one_of(
    st.sampled_from(ID_POOL),
    st.builds(lambda first, rest: first + rest,
              st.sampled_from("abcdefghijklmnopqrstuvwxyz"),
              st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=31)),
)
pool_markers = st.builds(lambda s, t: f"[[tool:{s}/{t}]]",
                         st.sampled_from(ID_POOL), st.sampled_from(ID_POOL))
fragments = st.one_of(
    st.text(max_size=8),
    pool_markers,
    st.sampled_from(["[[tool:", "]]", "/", "[[TOOL:a/b]]", "[[tool: a/b]]", "[[tool:a/b]",
                     "[[tool:A/b]]", "[", "]"]),
)
descriptions = st.lists(fragments, max_size=6).map(lambda parts: "".join(parts)[:256])
# Near misses only: every "]]" here follows a "[" of its own fragment, so no marker can form.
NEAR_MISSES = ["[[TOOL:a/b]]", "[[tool: a/b]]", "[[tool:a/b]", "[[tool:A/b]]", "[[tool:", "["]
marker_free = st.lists(
    st.one_of(st.text(st.characters(codec="utf-8", exclude_characters="]"), max_size=8),
              st.sampled_from(NEAR_MISSES)),
    max_size=8,
).map(lambda parts: "".join(parts)[:256])


@st.composite
def catalogs(draw: st.DrawFn, text: st.SearchStrategy[str] = descriptions) -> list | tuple:
    pairs = draw(st.lists(st.tuples(ids, ids), max_size=12, unique=True))
    rows = [rec(server, tool, draw(text)) for server, tool in pairs]
    return tuple(rows) if draw(st.booleans()) else rows


@st.composite
def requests(draw: st.DrawFn, catalog: list | tuple) -> dict[str, str]:
    if catalog and draw(st.booleans()):
        row = draw(st.sampled_from(list(catalog)))
        return req(row["server"], row["tool"])
    return req(draw(ids), draw(ids))


def oracle_naive(catalog: list | tuple, requested: dict[str, str]) -> dict[str, Any]:
    """The naive rule restated with the oracle regex, as a model to compare against."""
    candidate, source = (requested["server"], requested["tool"]), None
    for row in catalog:
        for found in ORACLE_MARKER.finditer(row["description"]):
            candidate, source = (found.group(1), found.group(2)), (row["server"], row["tool"])
    offered = {(row["server"], row["tool"]) for row in catalog}
    return {"choice": pair(*candidate) if candidate in offered else None,
            "source": pair(*source) if source else None}


def assert_untouched_and_fresh(rule: Rule, catalog: Any, requested: Any) -> dict[str, Any]:
    before = (snapshot(catalog), snapshot(requested), identities(catalog, requested))
    first, second = rule(catalog, requested), rule(catalog, requested)
    assert (snapshot(catalog), snapshot(requested), identities(catalog, requested)) == before
    assert first == second
    inputs = set(identities(catalog, requested))
    mine = [first, second] + [value for result in (first, second) for value in result.values()
                              if value is not None]
    assert len({id(obj) for obj in mine}) == len(mine), "a result container is shared"
    assert not {id(obj) for obj in mine} & inputs, "a result aliases an input"
    return first


@pytest.mark.parametrize("rule", RULES)
@settings(max_examples=examples(40))
@given(data=st.data())
def test_valid_inputs_are_untouched_and_results_fresh(rule: Rule, data: st.DataObject) -> None:
    """For any valid input, nothing handed in changes and every result container is new."""
    catalog = data.draw(catalogs())
    assert_untouched_and_fresh(rule, catalog, data.draw(requests(catalog)))


@settings(max_examples=examples(60))
@given(data=st.data())
def test_naive_matches_the_oracle(data: st.DataObject) -> None:
    """The naive rule agrees with a regex statement of the lesson's grammar on random catalogs."""
    catalog = data.draw(catalogs())
    requested = data.draw(requests(catalog))
    assert naive_tool_choice(catalog, requested) == oracle_naive(catalog, requested)


@settings(max_examples=examples(60))
@given(data=st.data())
def test_bound_ignores_descriptions_and_order(data: st.DataObject) -> None:
    """Rewriting every description and shuffling the catalog never changes the bound choice."""
    catalog = data.draw(catalogs())
    requested = data.draw(requests(catalog))
    shuffled = data.draw(st.permutations(list(catalog)))
    rewritten = [rec(row["server"], row["tool"], data.draw(descriptions)) for row in shuffled]
    expected = bound_tool_choice(catalog, requested)
    assert bound_tool_choice(rewritten, requested) == expected
    offered = (requested["server"], requested["tool"]) in {(r["server"], r["tool"])
                                                           for r in catalog}
    assert expected == {"choice": pair(requested["server"], requested["tool"]) if offered
                        else None, "source": None}


@settings(max_examples=examples(60))
@given(data=st.data())
def test_naive_equals_bound_without_markers(data: st.DataObject) -> None:
    """With no marker in any description the two rules agree exactly."""
    catalog = data.draw(catalogs(marker_free))
    assert not any(ORACLE_MARKER.search(row["description"]) for row in catalog)
    requested = data.draw(requests(catalog))
    assert naive_tool_choice(catalog, requested) == bound_tool_choice(catalog, requested)


def _bad_id(row: dict[str, Any], draw: st.DrawFn) -> None:
    row[draw(st.sampled_from(["server", "tool"]))] = draw(st.sampled_from(
        ["A", "1a", "a_b", "a\n", "é", "a" * 33, "", None, StrSub("a")]))


def _long_text(row: dict[str, Any], draw: st.DrawFn) -> None:
    row["description"] = draw(st.sampled_from(["x" * 257, "\ud800", "a\udc00b", None]))


def _extra_key(row: dict[Any, Any], draw: st.DrawFn) -> None:  # Any: the key drawn may not be a str
    row[draw(st.sampled_from(["permission", 1, StrSub("extra")]))] = "x"


def _missing_key(row: dict[str, Any], draw: st.DrawFn) -> None:
    del row[draw(st.sampled_from(["server", "tool", "description"]))]


CORRUPTIONS = [_bad_id, _long_text, _extra_key, _missing_key]


@st.composite
def invalid_inputs(draw: st.DrawFn) -> tuple[Any, Any]:
    """A valid catalog and request with exactly one kind of fault drawn into them."""
    catalog = list(draw(catalogs()))
    requested = draw(requests(catalog))
    faults = ["too-many", "container", "request"] + (["record", "duplicate"] if catalog else [])
    fault = draw(st.sampled_from(faults))
    if fault == "record":
        row = catalog[draw(st.integers(0, len(catalog) - 1))]
        draw(st.sampled_from(CORRUPTIONS))(row, draw)
    elif fault == "duplicate":
        twin = dict(draw(st.sampled_from(catalog)))
        catalog.insert(draw(st.integers(0, len(catalog))), twin)
    elif fault == "too-many":
        catalog += [rec("pad", f"t{n}") for n in range(13 - len(catalog))]
    elif fault == "container":
        wrappers: list[Callable[[list[Any]], object]] = [
            ListSub, TupleSub, lambda rows: dict(enumerate(rows)),
            lambda rows: {(r["server"], r["tool"]) for r in rows}]
        wrap = draw(st.sampled_from(wrappers))
        return wrap(catalog), requested
    else:
        _bad_id(requested, draw)
    return (tuple(catalog) if draw(st.booleans()) else catalog), requested


@pytest.mark.parametrize("rule", RULES)
@settings(max_examples=examples(40))
@given(bad=invalid_inputs())
def test_invalid_inputs_raise_and_stay_untouched(rule: Rule, bad: tuple[Any, Any]) -> None:
    """Random invalid inputs raise ValueError and leave content, key order and identity alone."""
    catalog, requested = bad
    before = (snapshot(catalog), snapshot(requested), identities(catalog, requested))
    with pytest.raises(ValueError):
        rule(catalog, requested)
    assert (snapshot(catalog), snapshot(requested), identities(catalog, requested)) == before
