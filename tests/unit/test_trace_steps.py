"""One trace line per plan step (airlock.records.Step), read by every reader as the three
lines a previous version wrote for it (records.expand), so a trace reads the same whichever
version wrote it.

tests/data/trace-v2.jsonl was written by the version before Step (tests/data/make-v2 says
how): each step as `authorization`, and for one that ran `call` and `observation`. Its twin,
built here, holds the same steps as this version writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from airlock import published, records, trace
from airlock.records import Authorization, Call, Damaged, Observation, Record, Step, Unrecognized
from airlock.wire import Call as WireCall, Done
from broker import tracing
from dashboard.feed import decode as page_decode
from dashboard.state import Board
from ops import escalations
from tests import lines as trace_lines

DATA = Path(__file__).parent.parent / "data"
V2_TRACE = (DATA / "trace-v2.jsonl").read_bytes().splitlines(keepends=True)
PLAN = [("shop", "lookup_order"), ("mail", "send_status")]
BASE = {"event", "at", "message_id", "stage"}


def as_steps(lines: list[bytes]) -> list[bytes]:
    """The same trace with each step as this version writes it: an authorization line and
    the call and observation written with it (same email, step and time) as one step line.
    The inverse of records.expand, for tests only (the broker writes Steps itself)."""
    out: list[bytes | Step] = []
    for raw in lines:
        record = records.decode(raw)
        last = out[-1] if out and isinstance(out[-1], Step) else None
        same = last is not None and isinstance(record, (Call, Observation)) and (
            record.message_id, record.step, record.at) == (last.message_id, last.step, last.at)
        if isinstance(record, Authorization):
            out.append(Step(at=record.at, message_id=str(record.message_id), stage=record.stage, step=record.step,
                            server=record.server, tool=record.tool, key=record.key, decision=record.decision,
                            student=record.student))
        elif same and isinstance(record, Call) and last is not None:
            out[-1] = msgspec.structs.replace(last, status=record.status, args=record.args, error=record.error or "",
                                              task=record.task, plan=record.plan)
        elif same and isinstance(record, Observation) and last is not None:
            out[-1] = msgspec.structs.replace(last, result=record.result)
        else:
            out.append(raw)
    return [records.encode(line) if isinstance(line, Step) else line for line in out]


V2_STEPS = as_steps(V2_TRACE)


def events(lines: list[bytes]) -> list[str]:
    return [json.loads(line)["event"] for line in lines]


def test_the_previous_version_wrote_three_lines_a_step_and_they_read_typed() -> None:
    """The fixture is what it claims: every line typed, steps as authorization, call and
    observation lines, refused, escalated, run, replayed, failed and a student's among them."""
    decoded = [records.decode(line) for line in V2_TRACE]
    assert not [r for r in decoded if isinstance(r, (Damaged, Unrecognized))]
    kinds = events(V2_TRACE)
    assert "step" not in kinds and kinds.count("call") == kinds.count("observation") > 0
    verdicts = {r.decision.get("verdict") for r in decoded if isinstance(r, Authorization)}
    statuses = {r.status for r in decoded if isinstance(r, Call)}
    assert verdicts == {"allow", "refuse", "escalate"} and statuses == {"ok", "error", "replayed"}
    assert any(r.student for r in decoded if isinstance(r, Authorization))


def test_this_version_writes_one_line_a_step() -> None:
    """The twin holds one step line per authorization line, and the call and observation
    lines are gone into them: fewer lines, fewer bytes, the other lines untouched."""
    kinds, twin = events(V2_TRACE), events(V2_STEPS)
    assert twin.count("step") == kinds.count("authorization")
    assert not {"authorization", "call", "observation"} & set(twin)
    assert len(V2_STEPS) == len(V2_TRACE) - 2 * kinds.count("call")
    assert sum(map(len, V2_STEPS)) < sum(map(len, V2_TRACE))
    assert [line for line in V2_STEPS if b'"event":"step"' not in line] == [
        line for line in V2_TRACE if json.loads(line)["event"] not in ("authorization", "call", "observation")]


def test_the_broker_writes_what_expands_to_the_previous_versions_lines() -> None:
    """Each email's steps, given to this broker's writer as the actor's Done: its step lines
    read back as exactly the lines the previous broker wrote (all but the time)."""
    groups: dict[tuple[str, str], list[dict]] = {}  # (email, time): one Done's lines
    for line in map(json.loads, V2_TRACE):
        if line["event"] in ("authorization", "call", "observation"):
            groups.setdefault((line["message_id"], line["at"]), []).append(line)
    assert len(groups) >= 10
    for (message_id, _), old in groups.items():
        ran = {line["step"]: line for line in old if line["event"] == "call"}
        returned = {line["step"]: line["result"] for line in old if line["event"] == "observation"}
        calls = []
        for line in (line for line in old if line["event"] == "authorization"):
            call = ran.get(line["step"], {})
            not_run = "refused" if line["decision"]["verdict"] == "refuse" else "escalated"
            calls.append(WireCall(step=line["step"], server=line["server"], tool=line["tool"],
                                  args=call.get("args", {}), status=call.get("status", not_run),
                                  error=call.get("error", ""), key=line["key"], decision=line["decision"],
                                  result=returned.get(line["step"], {}), student=line.get("student", "")))
        plan: list[list[str]] = next((call["plan"] for call in ran.values() if "plan" in call), [])
        task = next((call["task"] for call in ran.values() if "task" in call), "")
        done = Done(message_id=message_id, outcome="completed", calls=calls, task=task,
                    plan=[(server, tool) for server, tool in plan])
        written = tracing.calls(done)
        assert len(written) == len(calls)  # one line a step
        read = [json.loads(raw) for line in written for raw in trace_lines.expanded(line)]
        assert [{**r, "at": ""} for r in read] == [{**line, "at": ""} for line in old]


def test_every_reader_reads_both_shapes_alike(tmp_path: Path) -> None:
    """airlock.trace's readers (`airlock trace`, attack, score, the graders, bench, `airlock
    pending`), recovery's states and the page read the previous version's trace and the
    same steps written one line each as the same records."""
    old, new = tmp_path / "old" / "trace.jsonl", tmp_path / "new" / "trace.jsonl"
    for path, lines in ((old, V2_TRACE), (new, V2_STEPS)):
        path.parent.mkdir()
        path.write_bytes(b"".join(lines))
    read = list(trace.read(old))
    assert read == list(trace.read(new)) and len(read) == len(V2_TRACE)
    assert [trace.render(r) for r in read] == [trace.render(r) for r in trace.read(new)]
    decided = next(trace.about(r) for r in read if isinstance(r, records.DecisionTaken)) or ""
    assert list(trace.read(old, decided)) == list(trace.read(new, decided))
    assert any(isinstance(r, Call) and r.status == "replayed" for r in trace.read(new, decided))
    assert trace.states(old) == trace.states(new)
    assert escalations.decision_refused(old, decided, 0.0) == escalations.decision_refused(new, decided, 0.0) == ""
    for lines, path in ((V2_TRACE, old), (V2_STEPS, new)):  # the page, from the file and from the stream
        whole, public = Board(PLAN), Board(PLAN)
        for line in lines:
            for record in page_decode(line):
                whole.apply(record)
            for record in page_decode(published.line(line)):
                public.apply(record)
        path.with_name("page.json").write_text(json.dumps([whole.snapshot(), public.snapshot()]))
    assert old.with_name("page.json").read_text() == new.with_name("page.json").read_text()


def test_pending_reads_both_shapes_alike(tmp_path: Path) -> None:
    """`airlock pending` on each trace cut before the person's decision: the same email waits,
    for the same step, role and reason."""
    cut = next(i for i, line in enumerate(V2_TRACE) if json.loads(line)["event"] == "decision")
    waiting = []
    for name, lines in (("old", V2_TRACE[:cut]), ("new", as_steps(V2_TRACE[:cut]))):
        path = tmp_path / name / "trace.jsonl"
        path.parent.mkdir()
        path.write_bytes(b"".join(lines))
        waiting.append(escalations.waiting(path))
    assert waiting[0] == waiting[1] and len(waiting[0]) == 1 and waiting[0][0]["needs"] == "support-lead"


# --- the Step record ---------------------------------------------------------------------------


def _step(**fields: Any) -> Step:
    """A step of email m; `fields` add to or replace the defaults."""
    return Step(**{"at": "t", "message_id": "m", "stage": "actor", "step": 1, "server": "shop",
                   "tool": "lookup_order", "key": "m:1", "decision": {"verdict": "allow"}, **fields})


def test_a_step_round_trips_and_one_that_did_not_run_writes_no_call() -> None:
    """Encode then decode gives the same Step; a step that did not run writes its decision
    and key only (omit_defaults), so its line says nothing ran."""
    ran = _step(status="ok", args={"order_id": "7"}, task="t", plan=[("shop", "lookup_order")],
                result={"found": True}, student="actor.select")
    refused = _step(decision={"verdict": "refuse"})
    for step in (ran, refused):
        assert records.decode(records.encode(step)) == step
    assert set(json.loads(records.encode(refused))) == BASE | {"step", "server", "tool", "key", "decision"}
    assert [type(r) for r in records.expand(refused)] == [Authorization]
    assert [type(r) for r in records.expand(ran)] == [Authorization, Call, Observation]


def test_expand_gives_each_part_its_layer_and_the_steps_fields() -> None:
    authorization, call, observation = records.expand(_step(status="error", error="timeout", args={"a": 1},
                                                            result={"error": "timeout"}, student="s"))
    assert isinstance(authorization, Authorization) and isinstance(call, Call) and isinstance(observation, Observation)
    assert (authorization.layer, call.layer, observation.layer) == ("authorization", "execution", "observation")
    assert (call.status, call.error, call.key, call.args, observation.result) == ("error", "timeout", "m:1", {"a": 1},
                                                                                  {"error": "timeout"})
    assert {r.student for r in (authorization, call, observation)} == {"s"}
    assert all(r.stage == "actor" and r.STAGE == "actor" for r in (authorization, call, observation))


@pytest.mark.parametrize("record", [
    pytest.param(records.decode(V2_TRACE[0]), id="a-broker-line"),
    pytest.param(records.decode(b"torn"), id="damaged"),
    pytest.param(records.decode(b'{"at":"t","message_id":null,"stage":"broker","event":"later"}'), id="unknown"),
    pytest.param(records.decode(next(line for line in V2_TRACE if b'"event":"call"' in line)), id="an-old-call"),
])
def test_expand_leaves_any_other_record_as_it_is(record: records.TraceRecord) -> None:
    assert records.expand(record) == (record,)


@pytest.mark.parametrize(("change", "why"), [
    pytest.param({"stage": "reader"}, "may not say 'step'", id="from-the-reader"),
    pytest.param({"stage": "broker"}, "may not say 'step'", id="from-the-broker"),
    pytest.param({"message_id": None}, "message_id", id="about-no-email"),
    pytest.param({"status": "refused"}, "status", id="ran-refused"),
    pytest.param({"decision": "allow"}, "decision", id="decision-not-a-record"),
])
def test_a_step_line_that_does_not_fit_is_damaged(change: dict[str, object], why: str) -> None:
    """The stage rule and the types hold for step lines as for any event: only the actor's
    stage says one, always about an email, and it never claims a step ran as `refused`."""
    line = {**json.loads(records.encode(_step())), **change}
    decoded = records.decode(json.dumps(line).encode())
    assert isinstance(decoded, Damaged) and why in decoded.reason
    assert records.expand(decoded) == (decoded,)


def test_the_page_takes_a_step_line_as_its_three_records() -> None:
    """dashboard.feed.decode: a step line gives the page the records it always handled."""
    taken = page_decode(records.encode(_step(status="ok", result={"found": True})))
    assert [r["event"] for r in taken] == ["authorization", "call", "observation"]
    assert all(isinstance(r, dict) for r in taken)  # as the page gets them, whatever the annotation says
    assert all(r["message_id"] == "m" for r in taken)
    assert isinstance(records.decode(records.encode(_step())), Record)
