"""Lab `tool-identity` (seed 000): choose a tool by its full server/tool pair.

The student writes naive_tool_choice and bound_tool_choice in selection.py, to the seed's
exact contract (stated in full in labs/tool-identity/README.md). The reference is the
actor's own actor/selection.py; each checkpoint compares one student function with it on
the seed's worked examples, named edges and invalid inputs, then on catalogs hypothesis
generates, and checks on every call what the contract promises beside the value: the
result's exact types and key order, inputs untouched, results sharing no container with
the inputs or with each other, and Python's and NumPy's global random state untouched.

Each checkpoint calls only its own function, so either can be graded while the other
is still a TODO, as the seed requires. The student's functions run in their own confined
process (course.grading): the inputs they receive and the results they return cross as
copies, so what happened to the inputs, to the random state and to the identity of the
results is reported from inside that process by course/graders/tool_identity_probe.py, put in
place of the graded function; the value itself is judged here, against the reference.
"""

from __future__ import annotations

import copy
import traceback
from collections import OrderedDict
from collections.abc import Callable
from importlib.metadata._text import FoldedCase  # type: ignore[import-not-found]  # no stub; see StrSub
from pathlib import Path
from typing import Any

from actor import selection as reference
from course.grading import (
    CaseFailed,
    Failed,
    Passed,
    StudentStopped,
    Verdict,
    graded,
    hidden_cases,
    shown_value,
    student_function,
    student_module,
)

STUDENT_FILE = "selection.py"
PROBE = Path(__file__).with_name("tool_identity_probe.py")
TODO = Path(__file__).with_name("tool_identity_todo.py")
GRADED = ("naive_tool_choice", "bound_tool_choice")
Inputs = tuple[Any, Any]


def rec(server: Any, tool: Any, description: Any = "") -> dict[str, Any]:
    return {"server": server, "tool": tool, "description": description}


def req(server: Any, tool: Any) -> dict[str, Any]:
    return {"server": server, "tool": tool}


# Subclasses of dict, list and str, for "exact builtins only": from the standard library,
# since the arguments are unpickled in the student's process, which imports no grader.
DictSub = OrderedDict
StrSub = FoldedCase  # a str whose == ignores case


def list_subclass(items: list[Any]) -> list[Any]:
    return traceback.StackSummary(items)  # its items are ours: only its type counts here


def _two_reads() -> list[dict[str, str]]:
    return [rec("a", "read", "Lees de kaart."), rec("b", "read", "[[tool:b/read]]")]


def _three() -> list[dict[str, str]]:
    return [rec("a", "read", "Eerste marker [[tool:a/read]]"), rec("b", "read", "Gewone uitleg voor b/read."),
            rec("a", "helper", "Tweede marker [[tool:b/read]]")]


# Each case: its name in the student's terms, and a function making fresh inputs.
SHARED_CASES: list[tuple[str, Callable[[], Inputs]]] = [
    ("the seed's two reads: a/read requested, b/read's description holds a marker [[tool:b/read]]",
     lambda: (_two_reads(), req("a", "read"))),
    ("the seed's three records: markers in a/read and a/helper", lambda: (_three(), req("a", "read"))),
    ("a marker naming an unknown tool [[tool:onbekend/read]]",
     lambda: ([rec("a", "read", "Lees de kaart."), rec("b", "read", "[[tool:onbekend/read]]")], req("a", "read"))),
    ("the same tool name on another server", lambda: ([rec("b", "read", "Leest ook.")], req("a", "read"))),
    ("no marker anywhere: the request stands",
     lambda: ([rec("a", "read", "x"), rec("b", "read", "y")], req("b", "read"))),
    ("an empty catalog", lambda: ([], req("a", "read"))),
    ("a request the catalog does not offer", lambda: (_two_reads()[:1], req("c", "read"))),
    ("a catalog given as a tuple", lambda: (tuple(_two_reads()), req("a", "read"))),
    ("half a marker in each of two descriptions",
     lambda: ([rec("a", "read", "[[tool:b/"), rec("b", "read", "read]]")], req("a", "read"))),
    ("an upper-case marker [[TOOL:b/read]]",
     lambda: ([rec("a", "read", ""), rec("b", "read", "[[TOOL:b/read]]")], req("a", "read"))),
    ("a marker with a space [[tool: b/read]]",
     lambda: ([rec("a", "read", ""), rec("b", "read", "[[tool: b/read]]")], req("a", "read"))),
    ("two markers in one description: the last one counts",
     lambda: ([rec("a", "read", "[[tool:b/read]] then [[tool:a/read]]"), rec("b", "read", "")], req("b", "read"))),
    ("a description of exactly 256 characters", lambda: ([rec("a", "read", "x" * 256)], req("a", "read"))),
    ("a description of 256 characters of two UTF-8 bytes each 'é'",
     lambda: ([rec("a", "read", "\u00e9" * 256)], req("a", "read"))),
    ("a description of 256 emoji, four UTF-8 bytes each",
     lambda: ([rec("a", "read", "\U0001f600" * 256)], req("a", "read"))),
    ("a description of 256 code points, 128 letters with combining accents",
     lambda: ([rec("a", "read", "e\u0301" * 128)], req("a", "read"))),
    ("a record with its keys in another order",
     lambda: ([{"description": "", "tool": "read", "server": "a"}], req("a", "read"))),
    ("a request with its keys in another order", lambda: (_two_reads(), {"tool": "read", "server": "a"})),
    ("a marker naming the requested pair itself",
     lambda: ([rec("a", "read", "[[tool:a/read]]"), rec("b", "read", "")], req("a", "read"))),
    ("a request the catalog does not offer, and a marker naming a pair it does",
     lambda: ([rec("a", "read", "[[tool:a/read]]")], req("c", "read"))),
    ("a marker with an upper-case id [[tool:B/read]]",
     lambda: ([rec("a", "read", ""), rec("b", "read", "[[tool:B/read]]")], req("a", "read"))),
    ("a marker with an underscore in an id [[tool:b/read_all]]",
     lambda: ([rec("a", "read", ""), rec("b", "read", "[[tool:b/read_all]]")], req("a", "read"))),
    ("a marker with an id of 33 characters",
     lambda: ([rec("a", "read", ""), rec("b", "read", f"[[tool:b/{'r' * 33}]]")], req("a", "read"))),
    ("a marker with a non-ASCII letter in an id [[tool:b/réad]]",
     lambda: ([rec("a", "read", ""), rec("b", "read", "[[tool:b/r\u00e9ad]]")], req("a", "read"))),
    ("twelve records, the most allowed", lambda: ([rec("s", f"t{i}") for i in range(12)], req("s", "t11"))),
    ("ids of 32 characters", lambda: ([rec("a" * 32, "b" * 32)], req("a" * 32, "b" * 32))),
    # Invalid inputs: the contract's ValueError, whatever came before.
    ("a catalog that is a dict, not a list or tuple", lambda: ({"a": rec("a", "read")}, req("a", "read"))),
    ("a catalog that is a list subclass", lambda: (list_subclass(_two_reads()), req("a", "read"))),
    ("an empty catalog and a request with an upper-case id", lambda: ([], req("A", "read"))),
    ("an empty catalog and a request with an extra key", lambda: ((), {**req("a", "read"), "why": "x"})),
    ("thirteen records, one too many", lambda: ([rec("s", f"t{i}") for i in range(13)], req("s", "t0"))),
    ("a record with an extra key", lambda: ([{**rec("a", "read"), "x": 1}], req("a", "read"))),
    ("a record missing its description", lambda: ([req("a", "read")], req("a", "read"))),
    ("a record that is a dict subclass", lambda: ([DictSub(rec("a", "read"))], req("a", "read"))),
    ("an upper-case server id 'A'", lambda: ([rec("A", "read")], req("a", "read"))),
    ("a tool id starting with a digit", lambda: ([rec("a", "1read")], req("a", "read"))),
    ("a tool id with an underscore", lambda: ([rec("a", "read_all")], req("a", "read"))),
    ("a tool id starting with a hyphen '-read'", lambda: ([rec("a", "-read")], req("a", "read"))),
    ("an empty tool id ''", lambda: ([rec("a", "")], req("a", "read"))),
    ("a tool id with a trailing newline 'read\\n'", lambda: ([rec("a", "read\n")], req("a", "read"))),
    ("a server id with a leading space ' a'", lambda: ([rec(" a", "read")], req("a", "read"))),
    ("a tool id with a non-ASCII letter 'réad'", lambda: ([rec("a", "r\u00e9ad")], req("a", "read"))),
    ("a tool id with a fullwidth letter", lambda: ([rec("a", "\uff52ead")], req("a", "read"))),
    ("a tool id that is a str subclass", lambda: ([rec("a", StrSub("read"))], req("a", "read"))),
    ("an id of 33 characters", lambda: ([rec("a" * 33, "read")], req("a", "read"))),
    ("a description of 257 characters", lambda: ([rec("a", "read", "x" * 257)], req("a", "read"))),
    ("a description with a lone surrogate", lambda: ([rec("a", "read", "\ud800")], req("a", "read"))),
    ("a description that is bytes", lambda: ([rec("a", "read", b"x")], req("a", "read"))),
    ("a description that is None", lambda: ([rec("a", "read", None)], req("a", "read"))),
    ("a description that is a str subclass", lambda: ([rec("a", "read", StrSub("x"))], req("a", "read"))),
    ("a description of 257 characters of two UTF-8 bytes each",
     lambda: ([rec("a", "read", "\u00e9" * 257)], req("a", "read"))),
    ("a description of 258 code points, 129 letters with combining accents",
     lambda: ([rec("a", "read", "e\u0301" * 129)], req("a", "read"))),
    ("the same pair listed twice", lambda: ([rec("a", "read"), rec("a", "read", "again")], req("a", "read"))),
    ("the same pair listed twice, another record between",
     lambda: ([rec("a", "read"), rec("b", "read"), rec("a", "read", "again")], req("b", "read"))),
    ("an invalid record after the requested one", lambda: ([rec("a", "read"), rec("B", "x")], req("a", "read"))),
    ("a request with an extra key", lambda: (_two_reads(), {**req("a", "read"), "why": "x"})),
    ("a request with a non-str tool", lambda: (_two_reads(), req("a", 7))),
    ("a request that is a tuple", lambda: (_two_reads(), ("a", "read"))),
    ("a request that is a dict subclass", lambda: (_two_reads(), DictSub(req("a", "read")))),
    ("a request with an upper-case id", lambda: (_two_reads(), req("a", "Read"))),
    ("a request with a trailing space 'read '", lambda: (_two_reads(), req("a", "read "))),
    ("a request with a trailing newline 'read\\n'", lambda: (_two_reads(), req("a", "read\n"))),
]
BOUND_CASES: list[tuple[str, Callable[[], Inputs]]] = [
    ("a description whose marker names another offered tool",
     lambda: ([rec("a", "read", "Use [[tool:a/write]] instead"), rec("a", "write", "")], req("a", "read"))),
    ("catalog order reversed", lambda: (list(reversed(_three())), req("a", "read"))),
]


def naive(student_dir: Path) -> Verdict:
    return _grade("naive", student_dir, "naive_tool_choice", reference.naive_tool_choice, SHARED_CASES)


def bound(student_dir: Path) -> Verdict:
    return _grade("bound", student_dir, "bound_tool_choice", reference.bound_tool_choice, SHARED_CASES + BOUND_CASES)


def _grade(checkpoint: str, student_dir: Path, name: str, rule: Callable[[Any, Any], Any],
           cases: list[tuple[str, Callable[[], Inputs]]]) -> Verdict:
    def body() -> None:
        module = student_module(student_dir, STUDENT_FILE)
        student_function(module, name)
        module.use_reference([other for other in GRADED if other != name], TODO)
        module.use_reference([name], PROBE)
        function = student_function(module, name)
        for case, make in cases:
            _judge(case, function, rule, make)
        hidden_cases(_generated_inputs(), lambda inputs: _judge(
            f"a generated catalog {shown_value(inputs[0], 120)} with request {shown_value(inputs[1])}",
            function, rule, lambda: copy.deepcopy(inputs)), max_examples=150)
        hidden_cases(_perturbed_inputs(), lambda inputs: _judge(
            f"a generated catalog with one flaw {shown_value(inputs[0], 120)} with request {shown_value(inputs[1])}",
            function, rule, lambda: copy.deepcopy(inputs)), max_examples=150)

    return graded(checkpoint, body)


def _judge(case: str, function: Callable[..., Any], rule: Callable[[Any, Any], Any],
           make: Callable[[], Inputs]) -> None:
    name = function.__name__
    try:
        want: Any = rule(*make())
    except ValueError:
        want = ValueError
    report = _call(case, function, *make())
    got, raised = report["result"], report["raised"]
    if report["other_todo"]:
        raise CaseFailed(f"{case}: the other function not written yet",
                         f"{name} calls the other function, and stops when that one is not written yet; "
                         "each function must work on its own")
    if report["rng_changed"]:
        raise CaseFailed(f"{case}: the global random generators (RNG)",
                         f"{name} changed Python's or NumPy's global random state; it must leave it alone")
    if report["inputs_changed"]:
        raise CaseFailed(f"{case}: inputs changed", f"{name} changed the catalog or the request it was given"
                         + (" (key order counts)" if raised is None else " before raising"))
    if want is ValueError:
        if raised is None:
            raise CaseFailed(case, f"{name} returned {shown_value(got)}; expected ValueError for invalid input")
        if not raised[2]:
            raise CaseFailed(case, f"{name} raised {raised[0]}: {raised[1]}; expected ValueError")
        return
    if raised is not None:
        raise CaseFailed(case, f"{name} raised {raised[0]}: {raised[1]}; expected {shown_value(want)}")
    if got != want:
        raise CaseFailed(case, f"{name} returned {shown_value(got, 160)}; expected {shown_value(want, 160)}")
    if type(got) is not dict or list(got) != ["choice", "source"]:
        raise CaseFailed(f"{case}: key order",
                         "the result must be an exact dict with keys choice, source in that order; "
                         f"got {type(got).__name__} with keys {list(got)}")
    for key in ("choice", "source"):
        value = got[key]
        if value is not None and (type(value) is not dict or list(value) != ["server", "tool"]):
            raise CaseFailed(f"{case}: key order", f"result[{key!r}] must be an exact dict with keys server, tool "
                             f"in that order; got {shown_value(value)}")
    if not report["exact"]:
        raise CaseFailed(f"{case}: exact types", f"{name} returned a subclass of dict or str where the contract "
                         "asks for exact builtins")
    if report["second_raised"] is not None:
        first = report["second_raised"]
        raise CaseFailed(f"{case}: called twice", f"{name} raised {first[0]}: {first[1]} "
                         "the second time it was called with the same inputs")
    if report["aliasing"]:
        raise CaseFailed(f"{case}: aliasing", f"{name}'s result shares a dict with its inputs or with "
                         "another result; every result must be a new dict")


def _call(case: str, function: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """The probe's report on one call (see tool_identity_probe), or CaseFailed for a TODO,
    a hang or a crash."""
    try:
        report = function(*args)
    except NotImplementedError:
        raise CaseFailed(case, f"{function.__name__} is still a TODO: it raises NotImplementedError") from None
    except StudentStopped as exc:
        raise CaseFailed(case, f"{exc}: a function returns its answer") from None
    except Exception as exc:  # noqa: BLE001  the probe reports the student's errors; anything else is named
        raise CaseFailed(case, f"{function.__name__} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(report, dict) or set(report) != REPORT_KEYS:
        raise CaseFailed(case, f"{function.__name__} could not be judged: its process answered "
                               f"{shown_value(report)}")
    return report


REPORT_KEYS = {"result", "raised", "inputs_changed", "rng_changed", "exact", "second_raised", "aliasing", "other_todo"}


POOL = ["a", "b", "c", "read", "write", "x-1"]
LONG_UNITS = ["x", "\u00e9", "\u20ac", "\U0001f600", "e\u0301"]  # 1, 2, 3, 4 UTF-8 bytes; a combining pair


def _ids() -> Any:
    from hypothesis import strategies as st

    return st.one_of(st.sampled_from(POOL),
                     st.builds(lambda first, rest: first + rest, st.sampled_from("abcdefghijklmnopqrstuvwxyz"),
                               st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=31)))


def _near_ids() -> Any:
    """Ids one slip away from valid: case, spaces, newlines, underscores, a leading hyphen or
    digit, non-ASCII letters, 33 characters, empty; and values that are not text."""
    from hypothesis import strategies as st

    return st.one_of(
        _ids().map(str.upper),
        _ids().map(lambda i: i + "\n"),
        _ids().map(lambda i: " " + i),
        _ids().map(lambda i: i + " "),
        _ids().map(lambda i: i + "_x"),
        _ids().map(lambda i: "-" + i),
        _ids().map(lambda i: "7" + i),
        _ids().map(lambda i: i + "\u00e9"),
        _ids().map(lambda i: (i + "x" * 33)[:33]),
        st.just(""),
        st.text(max_size=6),
    )


def _perturbed_inputs() -> Any:
    """A generated valid input with one flaw (or one harmless change of key order), judged
    against the reference like any other: an invalid id, description, key set, type, count
    or a repeated pair must raise ValueError, wherever it sits in the catalog."""
    from hypothesis import strategies as st

    bad_descriptions = st.one_of(
        st.builds(lambda unit, extra: unit * (256 // len(unit) + extra), st.sampled_from(LONG_UNITS),
                  st.integers(1, 3)),
        st.sampled_from([None, 7, b"x", "\ud800", ["x"]]),
    )

    @st.composite
    def perturbed(draw: st.DrawFn) -> Inputs:
        catalog, requested = draw(_generated_inputs())
        rows: list[Any] = [dict(row) for row in catalog]
        request: Any = dict(requested)
        targets = [*rows, request]
        flaw = draw(st.sampled_from(["id", "description", "extra key", "missing key", "repeated pair", "too many",
                                     "catalog type", "record type", "request type", "key order"]))
        if flaw == "id":
            target = draw(st.sampled_from(targets))
            target[draw(st.sampled_from(["server", "tool"]))] = draw(st.one_of(_near_ids(), st.integers(),
                                                                               st.none()))
        elif flaw == "description" and rows:
            draw(st.sampled_from(rows))["description"] = draw(bad_descriptions)
        elif flaw == "extra key":
            draw(st.sampled_from(targets))[draw(st.sampled_from(["why", "Server", 1]))] = "x"
        elif flaw == "missing key":
            target = draw(st.sampled_from(targets))
            del target[draw(st.sampled_from(sorted(target)))]
        elif flaw == "repeated pair" and rows:
            copied = dict(draw(st.sampled_from(rows)), description=draw(st.sampled_from(["", "again"])))
            rows.insert(draw(st.integers(0, len(rows))), copied)
        elif flaw == "too many":
            rows += [rec("zz", f"t{index}") for index in range(13 - len(rows))]
        elif flaw == "catalog type":
            return draw(st.sampled_from([{"rows": rows}, {"a": rows[0]} if rows else {}, str(rows)])), request
        elif flaw == "record type" and rows:
            index = draw(st.integers(0, len(rows) - 1))
            rows[index] = draw(st.sampled_from([list(rows[index].items()), tuple(rows[index].values())]))
        elif flaw == "request type":
            request = draw(st.sampled_from([(request["server"], request["tool"]), [request["server"], request["tool"]],
                                            f"{request['server']}/{request['tool']}"]))
        elif flaw == "key order":  # valid: the order of an input's keys means nothing
            target = draw(st.sampled_from(targets))
            items = list(target.items())
            target.clear()
            target.update(reversed(items))
        return (tuple(rows) if type(catalog) is tuple else rows), request

    return perturbed()


def _generated_inputs() -> Any:
    from hypothesis import strategies as st

    ids = _ids()
    fragments = st.one_of(st.text(max_size=8),
                          st.builds(lambda s, t: f"[[tool:{s}/{t}]]", st.sampled_from(POOL), st.sampled_from(POOL)),
                          st.builds(lambda s, t: f"[[tool:{s}/{t}]]", _near_ids(), st.sampled_from(POOL)),
                          st.sampled_from(["[[tool:", "]]", "/", "[[TOOL:a/b]]", "[[tool: a/b]]", "[[tool:a/b]", "["]))
    descriptions = st.one_of(
        st.lists(fragments, max_size=6).map(lambda parts: "".join(parts)[:256]),
        st.builds(lambda unit, count: (unit * count)[:256], st.sampled_from(LONG_UNITS), st.integers(200, 256)),
    )

    @st.composite
    def inputs(draw: st.DrawFn) -> Inputs:
        pairs = draw(st.lists(st.tuples(ids, ids), max_size=12, unique=True))
        rows = [rec(s, t, draw(descriptions)) for s, t in pairs]
        if len(rows) > 0 and draw(st.booleans()):  # no draw when there are no rows
            pick = draw(st.sampled_from(rows))
            requested = req(pick["server"], pick["tool"])
        else:
            requested = req(draw(ids), draw(ids))
        return (tuple(rows) if draw(st.booleans()) else rows), requested

    return inputs()


# ---- in the stack: the student's bound_tool_choice in the actor, before every step -----------


def in_the_stack(student_dir: Path) -> Verdict:
    """The lab's emails through a private stack whose actor asks the student's
    bound_tool_choice before each step, with a marker in a description and a rug pull
    mid-run: every planned call must run on its planned pair, per calls.jsonl."""
    from course.graders import in_stack  # the stack's imports only where a stack runs

    ran = in_stack.run_lab("tool-identity", student_dir)
    if not isinstance(ran, in_stack.Ran):
        return ran
    plan = [("shop", "lookup-order"), ("mail", "send-status")]
    for email in ran.emails:
        name = ran.name(email)
        refused = ran.refusal(email)
        if refused is not None:
            rule = in_stack.student_rule(refused) or {}
            step = in_stack.where(refused)
            if rule.get("rule") == "student.selection":
                chosen = ((rule.get("read") or {}).get("answer") or {}).get("choice")
                return Failed(in_stack.CHECKPOINT, _wrong_choice_case(name, step, chosen, ran.catalog_file(email)),
                              f"{rule.get('reason')}: the actor refused the step, so this customer got no answer")
            return Failed(in_stack.CHECKPOINT, f"{name}: {step}",
                          f"the step was refused: {refused.decision.get('reason')}")
        records = ran.calls.get(email.id, [])
        ran_on = [(c.server, c.tool) for c in records]
        if email.outcome != "completed" or ran_on != plan:
            return Failed(in_stack.CHECKPOINT, name, f"outcome {email.outcome!r} ({email.reason}), calls {ran_on}; "
                                                      f"expected the plan {plan} to run")
        if any(c.student != "actor.select" for c in records):
            return Failed(in_stack.CHECKPOINT, name, "calls.jsonl does not mark these calls as decided with your "
                                                     "code (student = actor.select): was your selection asked?")
    return Passed(in_stack.CHECKPOINT)


def _wrong_choice_case(name: str, step: str, chosen: Any, catalog_file: Path | None) -> str:
    """The case in the student's terms: which pair the selection chose, and whether a
    description's marker named it."""
    if not isinstance(chosen, dict):
        return f"{name}: {step}: your selection chose nothing (None) for a planned pair the catalog offers"
    pair = f"{chosen.get('server')}/{chosen.get('tool')}"
    if catalog_file is not None and f"[[tool:{pair}]]" in catalog_file.read_text(encoding="utf-8"):
        return f"{name}: {step}: your selection follows the marker [[tool:{pair}]] in a description"
    if step.endswith(f"/{chosen.get('tool')}"):
        return f"{name}: {step}: your selection chose {pair}, the same tool name on another server"
    return f"{name}: {step}: your selection chose {pair}, not the planned pair"
