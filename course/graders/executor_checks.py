"""Graders of lab executor-checks (seed 003): the checks between a proposed call and its side effect.

Data: the student's checks.py, run in its own confined process (course.grading.student_module)
and called on named cases (the edges the lesson is about) and on hidden cases that
hypothesis generates from a fixed seed (derandomized, no example database), so a run grades
the same way every time and listing the visible examples is not enough. Each hidden case's
expected answer is fixed by how it was built, never by another implementation's opinion.
Readers: the lab runner, one checkpoint per call.
Rationale: the executor is judged by what it returns and by whether the tool ran, never by
what it prints. Answers come back as shapes: an Ok or an Error is known by its class name
and its fields. The mock tools are the grader's own callables: the student's code calls a
stub, the tool runs here, so its count of runs and the arguments it got are the grader's
memory. A student function that raises where it should return an Error is a failed case;
the `execute` checkpoint puts the reference helpers in place in the student's process, so
it judges the order of the checks and the side effect alone, whatever state the other
functions are in.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import find, strategies as st
from hypothesis.errors import HypothesisException, NoSuchExample

from course.catalog import LABS_ROOT
from course.grading import (
    Failed,
    Passed,
    StillTodo,
    StudentStopped,
    Verdict,
    find_settings,
    module_or_failed,
    shown_value,
    todo,
    unstable,
)

LAB_DIR = LABS_ROOT / "executor-checks"
FILE = "checks.py"
_HIDDEN = find_settings()


# A case: (what the student reads, the function's arguments, the expected answer: "none",
# "ok" or an Error kind, and why, shown when the student's answer differs).
Case = tuple[str, tuple[Any, ...], str, str]


def _shown(result: Any) -> str:
    if type(result).__name__ == "Error":
        return f"Error(kind={getattr(result, 'kind', '?')!r})"
    if type(result).__name__ == "Ok":
        return f"Ok({getattr(result, 'result', '?')!r})"[:200]
    return repr(result)[:200]


def _kind(result: Any) -> str | None:
    """"ok", an Error's kind, "none" for None, or None for anything else."""
    name = type(result).__name__
    if result is None:
        return "none"
    if name == "Ok":
        return "ok"
    if name == "Error":
        kind = getattr(result, "kind", None)
        return kind if isinstance(kind, str) else None
    return None


def _same(held: Any, carried: Any) -> bool:
    """Equal, and of the same type all the way down: True == 1 in Python, but a result that
    turned the tool's true into 1 is not the tool's result."""
    if type(held) is not type(carried):
        return False
    if isinstance(carried, dict):
        return held.keys() == carried.keys() and all(_same(held[k], carried[k]) for k in carried)
    if isinstance(carried, list):
        return len(held) == len(carried) and all(_same(h, c) for h, c in zip(held, carried, strict=True))
    return bool(held == carried)


def _expected(kind: str) -> str:
    return {"none": "None", "ok": "Ok(...)"}.get(kind, f"Error(kind={kind!r})")


def _judge(checkpoint: str, function: str, fn: Callable[..., Any], case: str, args: tuple[Any, ...],
           expect: str, why: str = "", carried: Any = None) -> Failed | None:
    """Call the student's function on one case: None when it answered `expect` (and, where
    `carried` is given, an Ok holding exactly that result)."""
    try:
        result = fn(*args)
    except NotImplementedError:
        raise StillTodo(function) from None
    except StudentStopped as exc:
        return Failed(checkpoint, case, f"{exc}; expected {function} to return {_expected(expect)}")
    except Exception as exc:  # noqa: BLE001  the student's code: any exception (exit too) is a failed case, named
        return Failed(checkpoint, case, f"{function} raised {type(exc).__name__}: {exc}; expected it to return "
                                        f"{_expected(expect)}. A check never raises: every problem is an Error value.")
    try:
        kind, shown = _kind(result), _shown(result)
        held_other = kind == "ok" and carried is not None and not _same(getattr(result, "result", None), carried)
    except Exception as exc:  # noqa: BLE001  a returned object whose attributes raise is still the student's answer
        return Failed(checkpoint, case, f"{function} returned an object that cannot be read ({type(exc).__name__})")
    if kind != expect:
        because = f" ({why})" if why else ""
        return Failed(checkpoint, case, f"expected {_expected(expect)}{because}; {function} returned {shown}")
    if held_other:
        return Failed(checkpoint, case, f"the tool returned {shown_value(carried)}; {function} returned {shown}. "
                                        "Ok carries the tool's result as the tool returned it")
    return None


def _grade(checkpoint: str, student_dir: Path, function: str,
           named: Callable[[], list[Case]],
           hidden: st.SearchStrategy[Case] | None) -> Verdict:
    """Named cases first (their messages teach), then the hidden ones; the first failure,
    shrunk by hypothesis to its simplest form, is the verdict."""
    module = module_or_failed(checkpoint, student_dir, FILE, function)
    if isinstance(module, Failed):
        return module
    fn = getattr(module, function)
    try:
        for case, args, expect, why in named():
            failed = _judge(checkpoint, function, fn, case, args, expect, why)
            if failed:
                return failed
        if hidden is not None:
            try:
                case, args, expect, why = find(
                    hidden, lambda c: _judge(checkpoint, function, fn, *c) is not None, settings=_HIDDEN)
            except NoSuchExample:
                return Passed(checkpoint)
            except HypothesisException as exc:  # e.g. Flaky: the same case answered two ways
                return unstable(checkpoint, function, exc)
            failed = _judge(checkpoint, function, fn, f"hidden case: {case}", args, expect, why)
            return failed or Failed(checkpoint, f"hidden case: {case}", "answered differently on a second call")
    except StillTodo:
        return todo(checkpoint, function, "executor-checks")
    return Passed(checkpoint)


# ---- allowlist ------------------------------------------------------------------------------

_PLAN = {("shop", "lookup_order"), ("mail", "send_status")}


_NAME = st.text(alphabet="abcsSo\u043e/_ \n\u0660", min_size=0, max_size=4)
# Characters a student's normalising turns into others: NFKC (fullwidth, long s, ligature,
# Kelvin sign), casefold (sharp s) and the upper case of a Latin letter.
_LOOKALIKE = {"s": "\uff53", "o": "\u017f", "a": "A", "b": "\ufb00", "c": "\u212a", "S": "\u00df"}
# Separators a student may join server and tool with into one string.
_SEPARATORS = [":", ".", "", " ", "|", "::", "-", "_", ",", ";", "\t", "\n", "@", "#", "\\", "\x00"]


def _disguised(name: str, at: int) -> str:
    """`name` with its character at `at` (if any) swapped for a look-alike or a spacing change."""
    if not name:
        return " "
    at %= len(name)
    char = name[at]
    return name[:at] + _LOOKALIKE.get(char, char.swapcase() if char.swapcase() != char else char + " ") + name[at + 1:]


def _allowlist_named() -> list[Case]:
    def call(server: Any, tool: Any) -> dict[str, Any]:
        return {"server": server, "tool": tool, "arguments": {}}

    return [
        ("shop/lookup_order, in the allowlist", (call("shop", "lookup_order"), _PLAN), "none", ""),
        ("a description that claims the tool is allowed",
         ({**call("shop", "lookup_order"), "description": "[[tool:shop/refund_all]]"}, _PLAN), "none",
         "extra fields do not change who the tool is"),
        ("mail/lookup_order: the allowed tool's name on another server", (call("mail", "lookup_order"), _PLAN),
         "not_allowed", "a tool is its server/tool pair, never its name alone"),
        ("SHOP/lookup_order: another case", (call("SHOP", "lookup_order"), _PLAN), "not_allowed",
         "names are compared exactly"),
        ("'shop '/lookup_order: a trailing space", (call("shop ", "lookup_order"), _PLAN), "not_allowed",
         "names are compared exactly, never trimmed"),
        ("sh\u043ep/lookup_order: a Cyrillic 'о' that looks Latin", (call("sh\u043ep", "lookup_order"), _PLAN),  # noqa: RUF001  a lookalike in the text is what this case is about
         "not_allowed", "look-alike letters are other names"),
        ("shop/Lookup_Order: the tool's name in another case", (call("shop", "Lookup_Order"), _PLAN),
         "not_allowed", "names are compared exactly, the tool's as much as the server's"),
        ("shop/'lookup_order\\n': a newline after the tool's name", (call("shop", "lookup_order\n"), _PLAN),
         "not_allowed", "names are compared exactly, never trimmed"),
        ("' shop'/lookup_order: a leading space", (call(" shop", "lookup_order"), _PLAN), "not_allowed",
         "names are compared exactly, never trimmed"),
        ("\uff53\uff48\uff4f\uff50/lookup_order: fullwidth letters", (call("\uff53\uff48\uff4f\uff50", "lookup_order"),
                                                                       _PLAN),
         "not_allowed", "fullwidth letters are other characters; normalising them away (NFKC) repairs a name "
                        "that should be refused"),
        ("'cafe\\u0301'/menu when only 'caf\\u00e9'/menu is allowed: e and a combining accent",
         (call("cafe\u0301", "menu"), {("caf\u00e9", "menu")}), "not_allowed",
         "the same-looking name in other code points is another name; normalising it (NFC) repairs it"),
        ("lookup_order/shop: server and tool swapped", (call("lookup_order", "shop"), _PLAN), "not_allowed", ""),
        ("'a/b'/'c' when only 'a'/'b/c' is allowed", (call("a/b", "c"), {("a", "b/c")}), "not_allowed",
         "joining server and tool with '/' makes two pairs one string"),
        *[(f"{'shop' + sep + 'lookup'!r}/'order' and the allowed 'shop'/{'lookup' + sep + 'order'!r}: the same "
            "joined text",
           (call("shop" + sep + "lookup", "order"), {("shop", "lookup" + sep + "order")}), "not_allowed",
           "joined into one string, with any separator, two pairs can become the same text")
          for sep in _SEPARATORS],
        ("the seed's format {'name': 'lookup_order'} without a server", ({"name": "lookup_order"}, _PLAN),
         "not_allowed", "no server, no pair"),
        ("{'name': 'shop/lookup_order'}: one string instead of server and tool",
         ({"name": "shop/lookup_order"}, _PLAN), "not_allowed", "a call names its server and tool in two fields"),
        ("{'tool': 'lookup_order'} without a server", ({"tool": "lookup_order", "arguments": {}}, _PLAN),
         "not_allowed", "no server, no pair: a missing server is never filled in"),
        ("mail/'shop/lookup_order': a pair inside the tool's name", (call("mail", "shop/lookup_order"), _PLAN),
         "not_allowed", "the tool's name is one string, never split into another pair"),
        ("a list ['shop', 'lookup_order'] instead of an object", (["shop", "lookup_order"], _PLAN), "not_allowed", ""),
        ("the string 'shop/lookup_order' instead of an object", ("shop/lookup_order", _PLAN), "not_allowed", ""),
        ("null instead of a call", (None, _PLAN), "not_allowed", ""),
        ("server is a list ['shop']", (call(["shop"], "lookup_order"), _PLAN), "not_allowed",
         "JSON can put any value there; a list cannot even be looked up in a set"),
        ("server is the number 1", (call(1, "lookup_order"), {(1, "lookup_order")}), "not_allowed",
         "server and tool are strings"),
        ("an empty allowlist", (call("shop", "lookup_order"), set()), "not_allowed", "the default is deny"),
    ]


@st.composite
def _allowlist_hidden(draw: st.DrawFn) -> Case:
    allowlist = draw(st.sets(st.tuples(_NAME, _NAME), min_size=1, max_size=4))
    server, tool = draw(st.sampled_from(sorted(allowlist)))
    at = draw(st.integers(0, 3))
    if draw(st.integers(0, 2)) == 0:  # a pair that only a string joining server and tool confuses with an allowed one
        sep = draw(st.sampled_from(_SEPARATORS))
        allowlist = {*allowlist, (server, tool[:at] + sep + tool[at:])}
        server, tool = server + sep + tool[:at], tool[at:]
    else:
        server, tool = draw(st.sampled_from([
            (server, tool), (tool, server), (server.upper(), tool), (server, tool.upper()), (server, tool.strip()),
            (server + " ", tool), (" " + server, tool), (server, tool + "\n"),
            (_disguised(server, at), tool), (server, _disguised(tool, at)),
            (server + "/" + tool[:1], tool[1:]), (draw(_NAME), tool), (server, draw(_NAME))]))
    expect = "none" if (server, tool) in allowlist else "not_allowed"
    call = {"server": server, "tool": tool, "arguments": {}}
    return f"call {server!r}/{tool!r} with allowlist {sorted(allowlist)}", (call, allowlist), expect, ""


def allowlist(student_dir: Path) -> Verdict:
    """allowlist_problem() lets through exactly the listed server/tool pairs."""
    return _grade("allowlist", student_dir, "allowlist_problem", _allowlist_named, _allowlist_hidden())


# ---- schema ---------------------------------------------------------------------------------

_ORDER = {"order_id": {"type": "str"}, "quantity": {"type": "int"}, "price": {"type": "float"},
          "gift": {"type": "bool"}}
_GOOD = {"order_id": "12345", "quantity": 2, "price": 9.5, "gift": False}


def _renamed(old: str, new: str) -> dict[str, Any]:
    return {(new if name == old else name): value for name, value in _GOOD.items()}


def _schema_named() -> list[Case]:
    def fits(**change: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({**_GOOD, **change}, _ORDER)

    return [
        ("arguments that fit exactly", fits(), "none", ""),
        ("the same arguments in another order", (dict(reversed(_GOOD.items())), _ORDER), "none",
         "a JSON object's keys have no order"),
        ("price 3, an int where a float is declared", fits(price=3), "none", "an int is a fine float"),
        ("quantity True", fits(quantity=True), "schema", ("in Python bool is a subclass of int: True is not the "
                                                          "quantity 1")),
        ("price False", fits(price=False), "schema", "a bool is not a number"),
        ("gift 1", fits(gift=1), "schema", "1 is not a bool"),
        ("quantity '2', digits in a string", fits(quantity="2"), "schema", "no coercion"),
        ("quantity 2.0, a float where an int is declared", fits(quantity=2.0), "schema", "no coercion"),
        ("order_id 12345, a number where a str is declared", fits(order_id=12345), "schema", "no coercion"),
        ("order_id '', an empty string", fits(order_id=""), "none",
         "an empty string is a str; lengths are range_problem's job"),
        ("quantity null", fits(quantity=None), "schema", "null is not an int"),
        ("price '9.5'", fits(price="9.5"), "schema", "no coercion"),
        ("gift missing", ({k: v for k, v in _GOOD.items() if k != "gift"}, _ORDER), "schema", "exact keys"),
        ("an extra key 'refund_all'", ({**_GOOD, "refund_all": True}, _ORDER), "schema", "exact keys"),
        ("an extra key 'refund_all' set to null", ({**_GOOD, "refund_all": None}, _ORDER), "schema",
         "a key set to null is still a key"),
        ("the key 'Quantity', quantity in another case", (_renamed("quantity", "Quantity"), _ORDER), "schema",
         "keys are compared exactly, never case-folded"),
        ("the key 'quantity ' with a trailing space", (_renamed("quantity", "quantity "), _ORDER), "schema",
         "keys are compared exactly, never trimmed"),
        ("price 10**400, a huge integer where a float is declared", fits(price=10**400), "none",
         "an int is a fine float, however large; its range is range_problem's job"),
        *[(f"{value!r} for a declared type {wanted!r}, which the executor does not know",
           ({"x": value}, {"x": {"type": wanted}}), "schema",
           "a type other than int, float, str and bool accepts nothing: default deny")
          for wanted, value in [("list", [1]), ("any", True), ("any", 1.5), ("any", "x"), ("text", "x"),
                                ("number", 2), ("boolean", False), ("integer", 3), ("string", "x")]],
        ("arguments are a list", ([1, 2], _ORDER), "schema", "arguments are a JSON object"),
        ("arguments are the JSON text of an object", ('{"order_id": "12345"}', _ORDER), "schema",
         "text is not an object"),
        ("arguments are null", (None, _ORDER), "schema", ""),
        ("{} for a tool without arguments", ({}, {}), "none", ""),
        ("an argument for a tool without arguments", ({"x": 1}, {}), "schema", "exact keys"),
    ]


_VALUES = {"int": st.integers(), "float": st.one_of(st.integers(), st.floats(allow_nan=False)),
           "str": st.text(max_size=5), "bool": st.booleans()}
_NOT: dict[str, list[Any]] = {"int": [True, False, 1.0, 0.0, "1", None, [1]],
                              "float": [True, False, "1.5", None, [0.5]],
                              "str": [1, 0.0, None, True, ["a"], {"a": 1}],
                              "bool": [0, 1, "true", None, 0.0]}
_KEYS = st.text(alphabet="abcdéf_", min_size=1, max_size=4)


@st.composite
def _schema_hidden(draw: st.DrawFn) -> Case:
    types = draw(st.dictionaries(_KEYS, st.sampled_from(sorted(_VALUES)), max_size=4))
    schema = {name: {"type": t} for name, t in types.items()}
    args = {name: draw(_VALUES[t]) for name, t in types.items()}
    change = draw(st.sampled_from(["none", "drop", "add", "retype", "rename"] if types else ["none", "add"]))
    expect = "none" if change == "none" else "schema"
    if change == "drop":
        del args[draw(st.sampled_from(sorted(args)))]
    elif change == "add":
        args[draw(_KEYS.filter(lambda k: k not in schema))] = draw(_VALUES["int"])
    elif change == "retype":
        name = draw(st.sampled_from(sorted(args)))
        args[name] = draw(st.sampled_from(_NOT[types[name]]))
    elif change == "rename":  # the same key in another spelling: case, spacing, a lookalike
        name = draw(st.sampled_from(sorted(args)))
        other = draw(st.sampled_from([name.upper(), name + " ", " " + name, name.replace("a", "\u0430"),
                                      name.replace("e", "\u0435")]).filter(lambda k: k not in schema))
        args[other] = args.pop(name)
    args = dict(draw(st.permutations(list(args.items()))))  # a JSON object's keys have no order
    return f"arguments {args!r} for the schema {types!r}", (args, schema), expect, ""


def schema(student_dir: Path) -> Verdict:
    """schema_problem() takes exactly the declared keys and types; a bool is not a number."""
    return _grade("schema", student_dir, "schema_problem", _schema_named, _schema_hidden())


# ---- ranges ---------------------------------------------------------------------------------

_LIMITS = {"quantity": {"type": "int", "min": 1, "max": 10}, "price": {"type": "float", "min": 0, "max": 1000},
           "note": {"type": "str", "max_length": 5}, "ratio": {"type": "float"},
           "stock": {"type": "int", "min": 0}, "discount": {"type": "float", "max": 0}}
_FINE = {"quantity": 3, "price": 9.5, "note": "gift", "ratio": 0.5, "stock": 7, "discount": -2.5}
_SERIAL = {"serial": {"type": "int", "min": 0, "max": 2**53}}  # 2**53 + 1 is the first int a float cannot hold


def _ranges_named() -> list[Case]:
    def given(**change: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({**_FINE, **change}, _LIMITS)

    return [
        ("values well inside their ranges", given(), "none", ""),
        ("quantity 1 and price 1000, on the bounds", given(quantity=1, price=1000), "none", "bounds are inclusive"),
        ("quantity 10, price 0", given(quantity=10, price=0), "none", "bounds are inclusive"),
        ("quantity 0", given(quantity=0), "range", "below min 1"),
        ("quantity 11", given(quantity=11), "range", "above max 10"),
        ("price -1, below min 0", given(price=-1), "range", "min 0 is a bound like any other, though 0 is falsy"),
        ("price 1001, an int above max 1000 where a float is declared", given(price=1001), "range",
         "an int in a float's place is held to the same range"),
        ("stock -1, with only a min of 0 declared", given(stock=-1), "range", "a min is checked without a max"),
        ("discount 0.5, with only a max of 0 declared", given(discount=0.5), "range",
         "a max is checked without a min"),
        ("discount -10**400, with only a max of 0 declared", given(discount=-10**400), "none",
         "an int is finite however large, and below max 0"),
        ("price nan", given(price=math.nan), "range", ("nan compares False with everything, so 'value < min' "
                                                       "lets it through")),
        ("price nan, a nan parsed from JSON: json.loads('NaN')", given(price=json.loads("NaN")), "range",
         "every nan is a nan, not only the object math.nan: 'x is math.nan' and 'x in (math.nan,)' miss it"),
        ("price inf", given(price=math.inf), "range", "inf is not a finite number"),
        ("ratio inf, a float without a declared range", given(ratio=math.inf), "range",
         "a float is finite whether or not a range is declared"),
        ("ratio -inf", given(ratio=-math.inf), "range", ""),
        ("ratio nan", given(ratio=math.nan), "range", ""),
        ("price -0.0", given(price=-0.0), "none", "-0.0 == 0"),
        ("price 1000.0000001", given(price=1000.0000001), "range", "above max 1000"),
        ("note of 5 characters", given(note="abcde"), "none", ""),
        ("note of 6 characters", given(note="abcdef"), "range", "max_length 5"),
        ("note 'abcd  ', 6 characters of which 2 are spaces", given(note="abcd  "), "range",
         "spaces are characters: max_length counts the text as it came"),
        ("note 'e\\u0301' * 3: 6 characters (an e and a combining accent, three times)", given(note="e\u0301" * 3),
         "range", "max_length counts characters as len() does; normalising the text first changes the count"),
        ("note 'ééééé', 5 characters in 10 UTF-8 bytes", given(note="ééééé"), "none",
         "max_length counts characters, not bytes"),
        ("quantity 10**400, a huge JSON integer", given(quantity=10**400), "range",
         "above max 10 (and an int that large cannot become a float)"),
        ("ratio 10**400, a huge integer where a float without range is declared", given(ratio=10**400), "none",
         "an int is finite; math.isfinite(10**400) raises OverflowError, so do not ask it"),
        ("price 5, an int where a float is declared", given(price=5), "none", ""),
        ("quantity 11 after a bool argument", ({"gift": True, **_FINE, "quantity": 11}, {"gift": {"type": "bool"},
                                                                                         **_LIMITS}),
         "range", "a bool has no range, and the arguments after it still have theirs"),
        ("serial 2**53 + 1 with max 2**53", ({"serial": 2**53 + 1}, _SERIAL), "range",
         "float(2**53 + 1) == 2**53: an int turned into a float is no longer the same number"),
        ("serial 2**53 with max 2**53", ({"serial": 2**53}, _SERIAL), "none", "bounds are inclusive"),
    ]


# Not finite, each built anew as a JSON parser would (never the one object math.nan).
_NOT_FINITE = st.sampled_from(["nan", "inf", "-inf", "-nan"]).map(float)


@st.composite
def _ranges_hidden(draw: st.DrawFn) -> Case:
    low = draw(st.sampled_from([0, -1, 1]) | st.integers(-1000, 1000))
    high = draw(st.sampled_from([low, low + 1]) | st.integers(low, low + 1000))
    kind = draw(st.sampled_from(["int", "float", "str"]))
    if kind == "str":
        spec: dict[str, Any] = {"type": "str", "max_length": draw(st.integers(1, 6))}
        value: Any = draw(st.text(max_size=8))
        inside = len(value) <= spec["max_length"]
    else:
        spec = {"type": kind}
        if draw(st.booleans()) or draw(st.booleans()):
            spec["min"] = low
        if draw(st.booleans()) or draw(st.booleans()):
            spec["max"] = high
        if kind == "int":
            value = draw(st.integers(low - 3, high + 3))
        else:
            value = draw(st.floats(low - 3, high + 3) | st.integers(low - 3, high + 3) | _NOT_FINITE)
        inside = (math.isfinite(value) and ("min" not in spec or value >= spec["min"])
                  and ("max" not in spec or value <= spec["max"]))
    return (f"{kind} {value!r} for {spec!r}", ({"x": value}, {"x": spec}), "none" if inside else "range", "")


def ranges(student_dir: Path) -> Verdict:
    """range_problem() keeps numbers finite and in range, strings within their length."""
    return _grade("ranges", student_dir, "range_problem", _ranges_named, _ranges_hidden())


# ---- execution ------------------------------------------------------------------------------


class _Tool:
    """A mock tool that counts its runs and keeps the arguments each run got; what it does
    comes from `behaviour`."""

    def __init__(self, behaviour: Callable[[dict[str, Any]], Any]) -> None:
        self.behaviour, self.runs, self.given = behaviour, 0, list[Any]()

    def __call__(self, args: dict[str, Any]) -> Any:
        self.runs += 1
        self.given.append(args)
        return self.behaviour(args)


def _raise(args: dict[str, Any]) -> Any:
    raise RuntimeError("the order store is down")


def _raise_key_error(args: dict[str, Any]) -> Any:
    raise KeyError("order_id")


def _raise_timeout_error(args: dict[str, Any]) -> Any:
    raise TimeoutError("the order store's own deadline passed")


def _size(result: dict[str, Any]) -> int:
    return len(json.dumps(result).encode())


_BLOB = {"blob": "x" * 100}
_ACCENTED = {"note": "\u00e9" * 20}  # json.dumps writes each é as \u00e9: 6 bytes, 1 character, 2 in UTF-8
_TIMEOUT_S = 0.25  # the slow case's timeout_s
_LATE_S = 0.7  # how long after timeout_s run_tool may take to return Error('timeout')
_ARGS = {"order_id": "1"}

# (what the student reads, what the tool does, max_result_bytes, expected kind, why, the Ok's
# result when "ok" is expected)
ExecutionCase = tuple[str, Callable[[dict[str, Any]], Any], int, str, str, Any]


def _execution_cases() -> list[ExecutionCase]:
    return [
        ("a tool that returns {'ok': True}", lambda a: {"ok": True}, 1000, "ok", "", {"ok": True}),
        ("a tool that raises RuntimeError", _raise, 1000, "tool_error", ("a failure is a typed error, never an "
                                                                         "invented success"), None),
        ("a tool that raises KeyError", _raise_key_error, 1000, "tool_error", "whatever the tool raises", None),
        ("a tool that raises TimeoutError at once", _raise_timeout_error, 1000, "tool_error",
         "the tool answered in time, with its own error: that is a tool error, not run_tool's timeout", None),
        ("a tool that returns None", lambda a: None, 1000, "tool_error", "None is not a result", None),
        ("a tool that returns a list", lambda a: [1, 2], 1000, "tool_error", "a result is a JSON object", None),
        ("a tool that returns the JSON text '{\"ok\": true}'", lambda a: '{"ok": true}', 1000, "tool_error",
         "a result is a JSON object, not text that could be parsed into one", None),
        ("a tool whose result holds a Python object", lambda a: {"x": object()}, 1000, "tool_error",
         "a result that is not JSON cannot be passed on", None),
        ("a result of exactly max_result_bytes", lambda a: dict(_BLOB), _size(_BLOB), "ok",
         "the cap itself is allowed", _BLOB),
        ("a result one byte over max_result_bytes", lambda a: dict(_BLOB), _size(_BLOB) - 1,
         "result_too_large", "size is len(json.dumps(result).encode())", None),
        ("a result with an accented é, of exactly max_result_bytes", lambda a: dict(_ACCENTED), _size(_ACCENTED), "ok",
         "the cap itself is allowed", _ACCENTED),
        ("a result with an accented é, one byte over max_result_bytes", lambda a: dict(_ACCENTED), _size(_ACCENTED) - 1,
         "result_too_large", "size is len(json.dumps(result).encode()), and json.dumps writes é as \\u00e9: "
                             "6 bytes, not 1 character or 2 UTF-8 bytes", None),
        ("a result of a megabyte", lambda a: {"blob": "x" * 1_000_000}, 65536, "result_too_large", "", None),
    ]


def _ran_once(checkpoint: str, case: str, tool: _Tool, args: dict[str, Any]) -> Failed | None:
    if tool.runs != 1:
        return Failed(checkpoint, case, f"the tool ran {tool.runs} times; run_tool calls it exactly once "
                                        f"(a second run is a second side effect)")
    if not _same(tool.given[0], args):
        return Failed(checkpoint, case, f"the tool got {shown_value(tool.given[0])}; run_tool passes it the "
                                        f"arguments it was given, {shown_value(args)}")
    return None


def execution(student_dir: Path) -> Verdict:
    """run_tool() runs the tool once, under its timeout, and types every failure."""
    checkpoint = "execution"
    module = module_or_failed(checkpoint, student_dir, FILE, "run_tool")
    if isinstance(module, Failed):
        return module
    run_tool = module.run_tool
    try:
        for case, behaviour, cap, expect, why, carried in _execution_cases():
            tool = _Tool(behaviour)
            failed = (_judge(checkpoint, "run_tool", run_tool, case, (tool, dict(_ARGS), 1.0, cap), expect, why,
                             carried)
                      or _ran_once(checkpoint, case, tool, _ARGS))
            if failed:
                return failed
        return _timing_cases(checkpoint, run_tool)
    except StillTodo:
        return todo(checkpoint, "run_tool", "executor-checks")


def _timing_cases(checkpoint: str, run_tool: Callable[..., Any]) -> Verdict:
    """A tool that hangs (until the grader lets it go), a quick one called while it still
    hangs, and a slow one that answers within its generous timeout."""
    release = threading.Event()

    def hang(args: dict[str, Any]) -> dict[str, Any]:
        release.wait(5.0)
        return {"late": True}

    def patient(args: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.5)
        return {"patient": True}

    slow = f"a tool that hangs (5 s) with timeout_s={_TIMEOUT_S}"
    try:
        hanging = _Tool(hang)
        start = time.monotonic()
        failed = _judge(checkpoint, "run_tool", run_tool, slow, (hanging, dict(_ARGS), _TIMEOUT_S, 1000), "timeout",
                        "no result in time is an error, not a wait")
        took = time.monotonic() - start
        if failed:
            return failed
        if took > _TIMEOUT_S + _LATE_S:
            return Failed(checkpoint, slow, f"run_tool returned Error('timeout') only after {took:.1f} s; "
                                            f"it returns once timeout_s has passed")
        failed = _ran_once(checkpoint, slow, hanging, _ARGS)
        if failed:
            return failed
        for case, behaviour, timeout_s, carried in [
                ("a quick tool, called while an earlier tool still hangs", lambda a: {"fresh": True}, 1.0,
                 {"fresh": True}),
                ("a tool that takes 0.5 s with timeout_s=2.0", patient, 2.0, {"patient": True})]:
            tool = _Tool(behaviour)
            failed = (_judge(checkpoint, "run_tool", run_tool, case, (tool, dict(_ARGS), timeout_s, 1000), "ok",
                             "a result within timeout_s is a result", carried)
                      or _ran_once(checkpoint, case, tool, _ARGS))
            if failed:
                return failed
    finally:
        release.set()
    return Passed(checkpoint)


# ---- execute: the order of the checks and the side effect ------------------------------------


def execute(student_dir: Path) -> Verdict:
    """execute() runs every check before the side effect, and the tool only when all pass."""
    checkpoint = "execute"
    module = module_or_failed(checkpoint, student_dir, FILE, "execute")
    if isinstance(module, Failed):
        return module
    # This checkpoint judges execute alone: in the student's process, the helpers it calls
    # are the reference's.
    module.use_reference(["allowlist_problem", "schema_problem", "range_problem", "run_tool"],
                         LAB_DIR / "solution" / FILE)
    run = module.execute
    try:
        for case, call, grant, cap, expect, runs_wanted in _execute_cases():
            failed = _execute_case(checkpoint, run, case, call, grant, cap, expect, runs_wanted)
            if failed:
                return failed
    except StillTodo:
        return todo(checkpoint, "execute", "executor-checks")
    return Passed(checkpoint)


def _execute_case(checkpoint: str, run: Callable[..., Any], case: str, call: Any, grant: str, cap: int, expect: str,
                  runs_wanted: dict[str, int]) -> Failed | None:
    """One call through the student's execute: its answer, which tools ran, with what, how fast."""
    release = threading.Event()  # the slow tool waits on it; set once the case is judged
    tools = _catalog(release)
    pair: Any = (call.get("server"), call.get("tool")) if isinstance(call, dict) else None
    tool = tools.get(pair)
    carried = tool["answer"] if expect == "ok" and tool is not None else None
    start = time.monotonic()
    try:
        failed = _judge(checkpoint, "execute", run, case, (call, _bare(tools), _ALLOW, grant, cap), expect,
                        carried=carried)
        took = time.monotonic() - start
    finally:
        release.set()
    if failed:
        return failed
    ran = {f"{server}/{tool}": t["run"].runs for (server, tool), t in tools.items() if t["run"].runs}
    if ran != runs_wanted:
        return Failed(checkpoint, case, f"tools that ran: {ran or 'none'}; expected {runs_wanted or 'none'}. "
                                        f"A tool runs only after every check passed, and then once.")
    for t in tools.values():
        if t["run"].runs and not _same(t["run"].given[0], call["arguments"]):
            return Failed(checkpoint, case, f"the tool got {shown_value(t['run'].given[0])}; execute passes it the "
                                            f"call's arguments, {shown_value(call['arguments'])}")
    if expect == "timeout" and tool is not None and took > tool["timeout_s"] + _LATE_S:
        return Failed(checkpoint, case, f"execute returned Error('timeout') only after {took:.1f} s; the tool's "
                                        f"timeout_s is {tool['timeout_s']}")
    return None


def _bare(tools: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The catalog as execute gets it: without the answers the grader expects."""
    return {pair: {k: v for k, v in tool.items() if k != "answer"} for pair, tool in tools.items()}


_ALLOW = {("shop", "lookup_order"), ("mail", "send_status"), ("shop", "ghost"), ("shop", "broken"),
          ("shop", "slow"), ("shop", "export"), ("shop", "status"), ("shop", "patient")}
_CAP = 65536


def _catalog(release: threading.Event) -> dict[tuple[str, str], dict[str, Any]]:
    order = {"order_id": {"type": "str", "max_length": 8}}

    def tool(permission: str, args: dict[str, Any], answer: Any, timeout_s: float = 2.0,
             behaviour: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
        return {"permission": permission, "args": args, "timeout_s": timeout_s, "answer": answer,
                "run": _Tool(behaviour or (lambda a: dict(answer)))}

    def patient(args: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.5)
        return {"patient": True}

    return {("shop", "lookup_order"): tool("read", order, {"status": "shipped"}),
            ("mail", "send_status"): tool("write", order, {"sent": True}),
            ("shop", "refund_all"): tool("write", {}, {"refunded": "everything"}),
            ("shop", "broken"): tool("read", {}, None, behaviour=_raise),
            ("shop", "status"): tool("read", {}, {"open": True}),
            ("shop", "slow"): tool("read", {}, None, timeout_s=_TIMEOUT_S,
                                   behaviour=lambda a: {"late": release.wait(5.0)}),
            ("shop", "patient"): tool("read", {}, {"patient": True}, timeout_s=2.0, behaviour=patient),
            ("shop", "export"): tool("read", {}, {"blob": "x" * 100_000})}


def _execute_cases() -> list[tuple[str, Any, str, int, str, dict[str, int]]]:
    def call(server: str, tool: str, **args: Any) -> dict[str, Any]:
        return {"server": server, "tool": tool, "arguments": args}

    lookup, send = call("shop", "lookup_order", order_id="12345"), call("mail", "send_status", order_id="12345")
    return [
        ("shop/lookup_order with a fitting order_id", lookup, "read", _CAP, "ok", {"shop/lookup_order": 1}),
        ("mail/send_status (write) under grant 'write'", send, "write", _CAP, "ok", {"mail/send_status": 1}),
        ("mail/send_status (write) under grant 'read'", send, "read", _CAP, "permission", {}),
        ("shop/lookup_order, a read tool, under grant 'write'", lookup, "write", _CAP, "ok", {"shop/lookup_order": 1}),
        ("mail/send_status (write) under grant 'Write'", send, "Write", _CAP, "permission", {}),
        ("mail/send_status (write) under grant 'write '", send, "write ", _CAP, "permission", {}),
        ("shop/refund_all: in the catalog, not in the allowlist", call("shop", "refund_all"), "write", _CAP,
         "not_allowed", {}),
        ("shop/ghost: in the allowlist, not in the catalog", call("shop", "ghost"), "write", _CAP, "not_allowed", {}),
        ("shop/lookup_order with its order id as a number (12345)", call("shop", "lookup_order", order_id=12345),
         "read", _CAP, "schema", {}),
        ("shop/lookup_order with a 9-character order_id", call("shop", "lookup_order", order_id="123456789"),
         "read", _CAP, "range", {}),
        ("shop/lookup_order with an extra argument 'refund': True",
         call("shop", "lookup_order", order_id="12345", refund=True), "read", _CAP, "schema", {}),
        ("shop/lookup_order without 'arguments'", {"server": "shop", "tool": "lookup_order"}, "read", _CAP, "schema",
         {}),
        ("shop/status with arguments {}", call("shop", "status"), "read", _CAP, "ok", {"shop/status": 1}),
        ("shop/status, which takes no arguments, without 'arguments'", {"server": "shop", "tool": "status"}, "read",
         _CAP, "schema", {}),
        ("shop/status with arguments null", {"server": "shop", "tool": "status", "arguments": None}, "read", _CAP,
         "schema", {}),
        ("shop/lookup_order with its arguments as JSON text",
         {"server": "shop", "tool": "lookup_order", "arguments": '{"order_id": "12345"}'}, "read", _CAP, "schema",
         {}),
        ("shop/broken, a tool that raises", call("shop", "broken"), "read", _CAP, "tool_error", {"shop/broken": 1}),
        (f"shop/slow, which answers after its timeout_s of {_TIMEOUT_S} s", call("shop", "slow"), "read", _CAP,
         "timeout", {"shop/slow": 1}),
        ("shop/patient, which answers in 0.5 s within its timeout_s of 2.0 s", call("shop", "patient"), "read",
         _CAP, "ok", {"shop/patient": 1}),
        ("shop/export, whose result is 100 kB over a cap of 64 KiB", call("shop", "export"), "read", _CAP,
         "result_too_large", {"shop/export": 1}),
        ("shop/export, whose result is 100 kB, under a cap of 200 kB", call("shop", "export"), "read", 200_000,
         "ok", {"shop/export": 1}),
        ("a call that is a list", ["shop", "lookup_order"], "read", _CAP, "not_allowed", {}),
        ("shop/refund_all with an argument: the allowlist is checked first", call("shop", "refund_all", all=True),
         "write", _CAP, "not_allowed", {}),
        ("mail/send_status under grant 'read' with a bad order_id: permission before schema",
         call("mail", "send_status", order_id=5), "read", _CAP, "permission", {}),
    ]


# ---- in the stack: the student's checks in the actor, before every step ------------------------


def in_the_stack(student_dir: Path) -> Verdict:
    """The lab's emails through a private stack whose actor asks the student's
    allowlist_problem, schema_problem and range_problem before each step: an order number
    over the tool's range, and a rug pull that turns a bool argument into an int, must be
    stopped by the student's checks (the kernel's, which run after, must find nothing left),
    and honest calls must run. Judged from the trace's decision records and calls.jsonl."""
    from actor import catalog as catalog_module, schema as kernel_schema
    from course.graders import in_stack  # the stack's imports only where a stack runs

    ran = in_stack.run_lab("executor-checks", student_dir)
    if not isinstance(ran, in_stack.Ran):
        return ran
    for email in ran.emails:
        name = ran.name(email)
        refused = ran.refusal(email)
        if refused is None:
            records = ran.calls.get(email.id, [])
            if email.outcome != "completed" or len(records) != 2:
                return Failed(in_stack.CHECKPOINT, name, f"outcome {email.outcome!r} ({email.reason}); the plan's "
                                                          f"two calls should have run")
            continue
        rule = in_stack.student_rule(refused) or {}
        call = (rule.get("read") or {}).get("call") or {}
        arguments = call.get("arguments", (rule.get("read") or {}).get("args", {}))
        case = f"{name}: {in_stack.where(refused)} " + ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        if rule.get("rule") == "student.missed":
            return Failed(in_stack.CHECKPOINT, case, f"{rule.get('reason')}. Your checks let this call through "
                                                     "to its side effect; only the kernel's own check stopped it")
        if rule.get("rule") != "student.checks":
            reason = rule.get("reason") or refused.decision.get("reason")
            return Failed(in_stack.CHECKPOINT, case, f"the step was refused: {reason}")
        live = ran.catalog_file(email)
        tool = catalog_module.load(live if live is not None else catalog_module.DEFAULT_PATH).get(
            (refused.server, refused.tool))
        if tool is not None and kernel_schema.problem(tool, arguments) is None:
            return Failed(in_stack.CHECKPOINT, case, f"{rule.get('reason')}, but this call fits the tool's schema: "
                                                     "a check that refuses honest calls stops the shop")
    return Passed(in_stack.CHECKPOINT)
