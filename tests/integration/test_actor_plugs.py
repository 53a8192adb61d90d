"""The actor's plug points (labs): a student's selection, checks or decision, run through
studentcode.student.StudentCode before the kernel's own; a wrong, hung or crashing student
function can only refuse a step, never put a call outside the plan or a wrong argument through."""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from actor.app import Actor, build
from airlock import records, task as task_module, trace
from airlock.plugs import Plug
from airlock.wire import Call, Done, Passed, Reading
from broker.router import Router
from tests.conftest import ROOT
from tests.unit.test_router import R1, A, V, lines, submit, workers

LABS = ROOT / "labs"
SELECT_RUN = LABS / "tool-identity" / "run"
CHECKS_RUN = LABS / "executor-checks" / "run"
SELECTION = (LABS / "tool-identity" / "solution" / "selection.py").read_text()
CHECKS = (LABS / "executor-checks" / "solution" / "checks.py").read_text()
PRECONDITIONS = (LABS / "preconditions" / "solution" / "preconditions.py").read_text()
GUARDED = ROOT / "tasks" / "order_status_guarded.toml"
OWNER, ORDER, STRANGERS_ORDER = "tom.baker@example.org", "772", "1207"  # actor/orders.toml


@pytest.fixture
def plugged(settings, tmp_path: Path) -> Iterator[Callable[..., Actor]]:
    """An actor for `task` on `catalog`, with `code` (a student's file) at plug point `point`."""
    made: list[Actor] = []

    def make(point: str | None, code: str, task: Path, catalog: Path | None = None, timeout_s: float = 2.0,
             data_dir: Path | None = None) -> Actor:
        student = tmp_path / f"student{len(made)}.py"
        student.write_text(code)
        changed = msgspec.structs.replace(settings, student_code=Plug(point, student) if point else None,
                                          student_timeout_s=timeout_s, catalog=catalog,
                                          data_dir=data_dir or settings.data_dir)
        made.append(build(changed, task_module.load(task)))
        return made[-1]

    yield make
    for actor in made:
        actor.close()


def run(actor: Actor, value: int | str, sender: str = "") -> Done:
    """A sender given here is one the SMTP intake authenticated (DKIM)."""
    (done,) = actor.handle(Passed(message_id="m1", value=value, sender=sender,
                                  sender_proof="dkim" if sender else "none"))
    assert isinstance(done, Done)
    return done


def refused_by(done: Done) -> tuple[str | None, str]:
    return done.calls[-1].decision.get("refused_by"), done.calls[-1].decision.get("reason", "")


def calls(settings) -> list[records.Call]:
    return list(trace.read_calls(settings.calls_path))


def with_body(source: str, function: str, body: str) -> str:
    """The reference file with `function` replaced by a definition taking any arguments."""
    return source + "\n\n" + f"def {function}(*args):\n" + textwrap.indent(textwrap.dedent(body), "    ")


MISBEHAVING = [
    pytest.param("while True:\n    pass\n", "did not return in time", id="hangs"),
    pytest.param("import os\nos._exit(3)\n", "ended its process", id="exits"),
    pytest.param("raise ZeroDivisionError('oops')\n", "ZeroDivisionError: oops", id="raises"),
    pytest.param("raise NotImplementedError\n", "is still a TODO", id="todo"),
    pytest.param("return object()\n", "not plain data", id="not-plain-data"),
]


# --- no plug: the actor as it always was ---------------------------------------------------


def test_without_a_plug_nothing_changes(plugged, settings) -> None:
    """No AIRLOCK_STUDENT_CODE: no plug, no child process, no `student` mark anywhere."""
    actor = plugged(None, "", ROOT / "tasks" / "order_status.toml")
    assert actor.executor.plug is None
    done = run(actor, "4411")
    assert done.outcome == "completed" and [c.student for c in done.calls] == ["", ""]
    assert all(not call.student for call in calls(settings))


def test_a_validator_plug_leaves_the_actor_alone(plugged) -> None:
    """A plug point of another service is not the actor's: the actor runs no student code."""
    actor = plugged("validator.check", "def check(answer):\n    return None\n", ROOT / "tasks" / "order_status.toml")
    assert actor.executor.plug is None and run(actor, "4411").outcome == "completed"


# --- actor.select ---------------------------------------------------------------------------


def test_the_reference_selection_runs_the_plan_marked_as_student_code(plugged, settings) -> None:
    """The reference bound_tool_choice chooses each planned pair: the plan runs, and each
    call (calls.jsonl and the Done) is marked actor.select."""
    actor = plugged("actor.select", SELECTION, SELECT_RUN / "task.toml", SELECT_RUN / "catalog.toml")
    done = run(actor, ORDER)
    assert done.outcome == "completed" and [c.student for c in done.calls] == ["actor.select"] * 2
    logged = calls(settings)
    assert [(c.server, c.tool, c.student) for c in logged] == [
        ("shop", "lookup-order", "actor.select"), ("mail", "send-status", "actor.select")]


def test_a_selection_that_follows_a_marker_is_refused_and_nothing_runs(plugged, settings) -> None:
    """bound_tool_choice that follows a description's [[tool:...]] marker: the step is refused
    under student.selection, naming the pair it chose; no tool runs, not even the chosen one."""
    follows = SELECTION.replace("    wanted = _request(requested)\n", "    wanted = _request(requested)\n"
                                "    for pair, description in rows:\n"
                                "        for marker in _markers(description):\n"
                                "            wanted = marker\n", 1)
    assert follows != SELECTION
    actor = plugged("actor.select", follows, SELECT_RUN / "task.toml", SELECT_RUN / "catalog.toml")
    done = run(actor, ORDER)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.selection"
    assert "helpdesk/notify" in reason and "shop/lookup-order" in reason
    assert calls(settings) == []


def test_a_selection_of_none_for_an_offered_pair_is_refused(plugged, settings) -> None:
    """None where the catalog offers the planned pair is a wrong choice too: refused, nothing runs."""
    actor = plugged("actor.select",
                    with_body(SELECTION, "bound_tool_choice", "return {'choice': None, 'source': None}\n"),
                    SELECT_RUN / "task.toml", SELECT_RUN / "catalog.toml")
    done = run(actor, ORDER)
    assert refused_by(done)[0] == "student.selection" and "nothing (None)" in refused_by(done)[1]
    assert calls(settings) == []


@pytest.mark.parametrize(("body", "said"), MISBEHAVING + [
    pytest.param("return 'mail/send-status'\n", "not a dict with a 'choice'", id="wrong-shape")])
def test_a_selection_that_misbehaves_fails_closed(plugged, settings, body: str, said: str) -> None:
    """A selection that hangs, exits, raises, is a TODO or answers in the wrong shape: the
    step is refused under student.failed, with the reason in the student's terms; no call."""
    actor = plugged("actor.select", with_body(SELECTION, "bound_tool_choice", body), SELECT_RUN / "task.toml",
                    SELECT_RUN / "catalog.toml", timeout_s=0.5)
    done = run(actor, ORDER)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.failed" and said in reason, reason
    assert calls(settings) == []


# --- actor.checks ---------------------------------------------------------------------------


def test_the_reference_checks_stop_a_value_over_the_tools_range(plugged, settings) -> None:
    """123456 passes the task's narrow type (1-999999) but not the tool's range (1-99999): the
    student's range_problem refuses it (student.checks, their reason), before any side effect;
    an honest value runs, each call marked actor.checks."""
    actor = plugged("actor.checks", CHECKS, CHECKS_RUN / "task.toml", CHECKS_RUN / "catalog.toml")
    done = run(actor, 123456)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.checks" and "range" in reason and calls(settings) == []
    assert done.calls[-1].decision["rules"][0]["read"]["call"]["arguments"] == {"order_id": 123456}
    (done,) = actor.handle(Passed(message_id="m2", value=30417))
    assert done.outcome == "completed" and {c.student for c in calls(settings)} == {"actor.checks"}


def test_checks_that_take_a_bool_for_an_int_are_caught_by_the_kernel(plugged, settings, tmp_path: Path) -> None:
    """After the rug pull `urgent` is an int, and the plan sends False. Checks that forget
    bool is a subclass of int allow it; the kernel refuses it (student.missed), no mail is sent."""
    wrong = CHECKS.replace("    if isinstance(value, bool):\n        return False\n    if wanted == \"int\":",
                           "    if wanted == \"int\":", 1)
    assert wrong != CHECKS
    catalog = tmp_path / "live-catalog.toml"
    shutil.copyfile(CHECKS_RUN / "catalog.toml", catalog)
    actor = plugged("actor.checks", wrong, CHECKS_RUN / "task.toml", catalog)
    # Its own data dir: two live actors cannot share one ledger (actor/ledger.py's lock).
    reference = plugged("actor.checks", CHECKS, CHECKS_RUN / "task.toml", catalog, data_dir=tmp_path / "reference")
    shutil.copyfile(CHECKS_RUN / "rug-pull.toml", tmp_path / "swap.toml")
    os.replace(tmp_path / "swap.toml", catalog)  # the rug pull, after both actors bound their plan
    done = run(actor, 30417)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.missed" and "$.urgent" in reason
    assert [c.tool for c in calls(settings)] == ["lookup_order"]
    (done,) = reference.handle(Passed(message_id="m2", value=30417))
    assert refused_by(done)[0] == "student.checks" and [c.tool for c in calls(settings)] == ["lookup_order"]
    assert [c.tool for c in trace.read_calls(tmp_path / "reference" / "calls.jsonl")] == ["lookup_order"]


def test_checks_that_refuse_everything_only_make_it_stricter(plugged, settings) -> None:
    """A student's problem where the kernel sees none refuses the step (stricter is allowed)."""
    actor = plugged("actor.checks", with_body(CHECKS, "allowlist_problem", "return Error('not_allowed', 'no')\n"),
                    CHECKS_RUN / "task.toml", CHECKS_RUN / "catalog.toml")
    done = run(actor, 30417)
    assert refused_by(done) == ("student.checks", "your allowlist_problem() found a problem: not_allowed: 'no'")
    assert calls(settings) == []


@pytest.mark.parametrize(("body", "said"), MISBEHAVING + [
    pytest.param("return 'looks fine'\n", "neither None nor an Error", id="wrong-shape")])
def test_checks_that_misbehave_fail_closed(plugged, settings, body: str, said: str) -> None:
    """schema_problem that hangs, exits, raises, is a TODO or answers a string: student.failed, no call."""
    actor = plugged("actor.checks", with_body(CHECKS, "schema_problem", body), CHECKS_RUN / "task.toml",
                    CHECKS_RUN / "catalog.toml", timeout_s=0.5)
    done = run(actor, 30417)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.failed" and said in reason, reason
    assert calls(settings) == []


# --- actor.decide ---------------------------------------------------------------------------


def test_the_reference_decide_refuses_a_strangers_order_and_answers_the_owner(plugged, settings) -> None:
    """The student's decide() is the decision record: corroboration refuses a stranger's
    order, the owner gets their status; every call is marked actor.decide."""
    actor = plugged("actor.decide", PRECONDITIONS, GUARDED)
    done = run(actor, STRANGERS_ORDER, OWNER)
    assert done.outcome == "refused" and refused_by(done)[0] == "corroboration"
    assert [c.tool for c in calls(settings)] == ["lookup_order"]
    (done,) = actor.handle(Passed(message_id="m2", value=ORDER, sender=OWNER, sender_proof="dkim"))
    assert done.outcome == "completed" and [c.student for c in done.calls] == ["actor.decide"] * 2
    assert [c.student for c in calls(settings)] == ["actor.decide"] * 3


def test_a_decide_that_allows_everything_is_overruled_by_the_kernel(plugged, settings) -> None:
    """decide() that allows a stranger's order: the kernel's preconditions refuse it anyway,
    under student.missed naming the kernel's reason; no status mail leaves."""
    actor = plugged("actor.decide", with_body(PRECONDITIONS, "decide", "return Verdict()\n"), GUARDED)
    done = run(actor, STRANGERS_ORDER, OWNER)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.missed" and "independent sources" in reason
    assert [c.tool for c in calls(settings)] == ["lookup_order"]


def test_a_decide_that_refuses_everything_stands(plugged, settings) -> None:
    """decide() stricter than the kernel: its refusal is the decision."""
    actor = plugged("actor.decide", with_body(PRECONDITIONS, "decide", "return Verdict('refuse', 'closed today')\n"),
                    GUARDED)
    done = run(actor, ORDER, OWNER)
    assert done.outcome == "refused" and done.reason.endswith("closed today") and calls(settings) == []


def test_a_decide_cannot_name_an_approver_the_kernel_did_not_check(plugged, settings) -> None:
    """decide() that allows the owner's order and claims dana approved it with some key: the
    call runs (the kernel allows it too), but the record names no approver and no key, since
    nobody proved one."""
    body = "return Verdict('allow', 'fine', approver='dana (support-lead)', approver_key='forged')\n"
    actor = plugged("actor.decide", with_body(PRECONDITIONS, "decide", body), GUARDED)
    done = run(actor, ORDER, OWNER)
    assert done.outcome == "completed"
    for call in done.calls:
        assert call.decision["approver"] is None and "approver_key" not in call.decision, call.decision


@pytest.mark.parametrize(("body", "said"), MISBEHAVING + [
    pytest.param("return 'allow'\n", "not a Verdict", id="a-string"),
    pytest.param("return Verdict('maybe')\n", "the verdict 'maybe'", id="unknown-verdict"),
    pytest.param("return {'verdict': 'allow', 'rules': 'all'}\n", "not a Verdict", id="rules-not-a-list"),
    pytest.param("return Verdict('allow', 'x' * 500_000)\n", "bytes, more than", id="a-huge-record"),
])
def test_a_decide_that_misbehaves_fails_closed(plugged, settings, body: str, said: str) -> None:
    """decide() that hangs, exits, raises, is a TODO or answers what does not convert
    strictly to a Verdict: student.failed, nothing runs."""
    actor = plugged("actor.decide", with_body(PRECONDITIONS, "decide", body), GUARDED, timeout_s=0.5)
    done = run(actor, ORDER, OWNER)
    rule, reason = refused_by(done)
    assert done.outcome == "refused" and rule == "student.failed" and said in reason, reason
    assert calls(settings) == []


# --- the mark on the wire and in the trace ----------------------------------------------------


def test_the_trace_marks_steps_that_ran_student_code(settings) -> None:
    """A Call with `student` puts it on its step line, and so on each of the authorization,
    call and observation it is read as; a Call without it (no plug, or an older actor)
    leaves the key out."""
    router = Router(settings, boot=0xABC)
    workers(router)
    for student in ("actor.select", ""):
        message_id, _ = submit(router)
        router.handle("reader", R1, Reading(message_id=message_id, answer="4411", source="model"), 1.0)
        router.handle("validator", V, Passed(message_id=message_id, value="4411"), 2.0)
        call = Call(step=1, server="shop", tool="lookup_order", args={"order_id": "4411"}, status="ok", student=student)
        effects = router.handle("actor", A, Done(message_id=message_id, outcome="completed", calls=[call]), 3.0)
        marked = [line.get("student") for line in lines(effects) if line["event"] != "outcome"]
        assert marked == [student or None]  # one step line
        read = [record for effect in effects if isinstance(effect, bytes)
                for record in records.expand(records.decode(effect)) if not isinstance(record, records.OutcomeLine)]
        assert [type(record) for record in read] == [records.Authorization, records.Call, records.Observation]
        steps = (records.Authorization, records.Call, records.Observation)
        assert [record.student for record in read if isinstance(record, steps)] == [student] * 3
    rendered = trace.render(records.Call(at="t", message_id="m", stage="actor", step=1, server="shop",
                                         tool="lookup_order", args={}, student="actor.select"))
    assert "[student code: actor.select]" in rendered  # airlock trace shows the mark (trace.render)


def test_an_old_call_without_the_field_still_reads() -> None:
    """A Call encoded before `student` existed decodes with student ""; the default is not encoded."""
    old = msgspec.msgpack.encode({"kind": "call", "step": 1, "server": "s", "tool": "t", "args": {}, "status": "ok"})
    call = msgspec.msgpack.decode(old, type=Call)
    assert call.student == "" and b"student" not in msgspec.msgpack.encode(call)


def test_a_huge_answer_stays_out_of_the_record(plugged, settings) -> None:
    """A selection answering a 500 kB pair: refused, and the Done (one wire frame) stays small."""
    actor = plugged("actor.select", with_body(SELECTION, "bound_tool_choice",
                                              "return {'choice': {'server': 'x' * 500_000, 'tool': 't'}}\n"),
                    SELECT_RUN / "task.toml", SELECT_RUN / "catalog.toml")
    done = run(actor, ORDER)
    assert refused_by(done)[0] == "student.selection" and calls(settings) == []
    assert len(msgspec.msgpack.encode(done)) < 20_000
