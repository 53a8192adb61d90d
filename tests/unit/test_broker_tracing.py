"""broker.tracing and broker.outbox alone: what each worker result becomes in the trace."""

from __future__ import annotations

import json

from airlock import records
from airlock.wire import Call, Detail, Done, Passed, Read, Reading, Rejected, Unreadable
from broker import tracing
from broker.journal import QueuedEmail
from broker.outbox import Outbox, Send


def test_a_workers_notes_never_override_the_brokers_fields() -> None:
    """Untrusted notes are written, but the broker's own fields and the base keys win: a
    note this contract does not name is kept apart, in other_notes."""
    notes: Detail = {"layer": "evil", "event": "outcome", "stage": "broker", "answer": "9", "subject": "s"}
    line = json.loads(tracing.model_answer(Reading(message_id="m-1", answer="4411", source="model", notes=notes)))
    assert (line["layer"], line["event"], line["stage"], line["answer"]) == ("model_output", "model_answer", "reader",
                                                                            "4411")
    assert line["subject"] == "s" and line["other_notes"] == {"layer": "evil", "event": "outcome", "stage": "broker",
                                                              "answer": "9"}


def test_a_model_answer_is_cut_and_its_length_kept() -> None:
    answer = "x" * (tracing.TRACE_TEXT_LIMIT + 5)
    line = json.loads(tracing.model_answer(Reading(message_id="m-1", answer=answer, source="model")))
    assert len(line["answer"]) == tracing.TRACE_TEXT_LIMIT and line["answer_chars"] == len(answer)
    assert line["stage"] == "reader" and line["layer"] == "model_output"


def test_a_rejection_for_shape_is_the_parsers_and_student_only_when_set() -> None:
    """Rules ending in a parse suffix are the parser layer; `student` appears only when a lab's code ran."""
    shape = json.loads(tracing.rejected(Rejected(message_id="m", rule="order_id.pattern", reason="r")))
    value = json.loads(tracing.rejected(Rejected(message_id="m", rule="order_id.range", reason="r", student="s.x")))
    assert (shape["layer"], "student" in shape) == ("parser", False)
    assert (value["layer"], value["student"]) == ("validator", "s.x")
    passed = json.loads(tracing.passed(Passed(message_id="m", value=4411)))
    assert passed["verdict"] == "passed" and "student" not in passed
    unreadable = json.loads(tracing.unreadable(Unreadable(message_id="m", rule="mail.x", reason="r")))
    assert (unreadable["layer"], unreadable["rule"]) == ("parser", "mail.x")


def test_each_plan_step_is_one_line_and_one_that_did_not_run_has_its_decision_only() -> None:
    """One `step` line per step: a run step carries its call (naming the plan it ran under)
    and its result; a refused or escalated one its key and decision alone."""
    calls = [Call(step=0, server="shop", tool="lookup", args={"id": 1}, status="ok", key="k0",
                  decision={"verdict": "allow"}, result={"found": True}),
             Call(step=1, server="shop", tool="refund", args={"id": 1}, status="refused", key="k1",
                  decision={"verdict": "refuse"}),
             Call(step=2, server="mail", tool="send", args={}, status="escalated", key="k2",
                  decision={"verdict": "escalate"})]
    lines = [json.loads(b) for b in tracing.calls(Done(message_id="m", outcome="refused", calls=calls,
                                                       task="t", plan=[("shop", "lookup")]))]
    assert [(line["event"], line["stage"], line["step"]) for line in lines] == [("step", "actor", 0),
                                                                               ("step", "actor", 1),
                                                                               ("step", "actor", 2)]
    assert {key: lines[0][key] for key in ("status", "args", "plan", "task", "result", "key", "decision")} == {
        "status": "ok", "args": {"id": 1}, "plan": [["shop", "lookup"]], "task": "t", "result": {"found": True},
        "key": "k0", "decision": {"verdict": "allow"}}
    for line in lines[1:]:  # did not run: nothing of a call, not even its status
        assert not {"status", "args", "error", "task", "plan", "result"} & set(line) and line["key"]


def test_the_outbox_hands_over_everything_once_in_order() -> None:
    out = Outbox()
    out.trace(records.Stopped("t", None, "broker", in_flight=0))
    out.journal(QueuedEmail("m-1", b"raw", "text"))
    out.send("reader", b"r", Read(message_id="m-1", raw=b"raw", format="text"))
    first = out.take()
    assert [type(e) for e in first] == [bytes, QueuedEmail, Send] and out.take() == []
