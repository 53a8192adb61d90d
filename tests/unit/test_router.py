"""The broker's routing rules, driven through Router.handle() with no sockets."""

from __future__ import annotations

import json

import msgspec
import pytest

from airlock.wire import (
    Accepted,
    Await,
    Call,
    Detail,
    Done,
    Event,
    Heartbeat,
    Hello,
    Malformed,
    Notice,
    Passed,
    Ping,
    Read,
    Reading,
    Refused,
    Rejected,
    Result,
    Status,
    Submit,
    Unreadable,
    Violation,
)
from broker.journal import QueuedEmail
from broker.router import Router, Send
from tests.lines import raw_line

R1, R2, V, A, CLIENT = b"r1", b"r2", b"v", b"a", b"c"


@pytest.fixture
def router(settings) -> Router:
    return Router(settings, boot=0xABC)


def sends(effects, role: str | None = None) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and (role is None or e.role == role)]


def sent_email(send: Send) -> Read:
    """The email a send to a reader carries (anything else there is a failure)."""
    assert isinstance(send.message, Read), send
    return send.message


def lines(effects) -> list[dict]:
    return [json.loads(e) for e in effects if isinstance(e, bytes)]


def outcomes(effects) -> list[dict]:
    return [line for line in lines(effects) if line["event"] == "outcome"]


def submit(router: Router, ref: int = 1, raw: bytes = b"Order 4411", now: float = 0.0) -> tuple[str, list]:
    effects = router.handle("intake", CLIENT, Submit(ref=ref, raw=raw, format="text"), now)
    (accepted,) = [s.message for s in sends(effects, "intake")]
    assert isinstance(accepted, Accepted)
    return accepted.message_id, effects


def workers(router: Router, readers=(R1,), credit: int = 1) -> None:
    for reader in readers:
        router.handle("reader", reader, Hello(credit=credit), 0.0)
    router.handle("validator", V, Hello(credit=8), 0.0)
    router.handle("actor", A, Hello(credit=8), 0.0)


def test_full_flow_records_one_outcome(router: Router) -> None:
    """Read -> reader, Reading -> validator, Passed -> actor, Done -> one outcome line."""
    workers(router)
    message_id, effects = submit(router)
    assert message_id == "abc-1"
    (to_reader,) = sends(effects, "reader")
    assert to_reader.identity == R1 and isinstance(to_reader.message, Read)
    effects = router.handle("reader", R1, Reading(message_id=message_id, answer="4411", source="model",
                                                  notes={"subject": "x"}), 1.0)
    (to_validator,) = sends(effects, "validator")
    assert to_validator.message == Reading(message_id=message_id, answer="4411", source="model")
    effects = router.handle("validator", V, Passed(message_id=message_id, value="4411"), 2.0)
    (to_actor,) = sends(effects, "actor")
    assert to_actor.message == Passed(message_id=message_id, value="4411")
    call = Call(step=1, server="shop", tool="lookup_order", args={"order_id": "4411"}, status="ok")
    effects = router.handle("actor", A, Done(message_id=message_id, outcome="completed", calls=[call]), 3.0)
    (outcome,) = outcomes(effects)
    assert outcome["outcome"] == "completed" and outcome["message_id"] == message_id
    assert [line["event"] for line in lines(effects)] == ["step", "outcome"]  # one line per plan step
    assert (lines(effects)[0]["step"], lines(effects)[0]["status"]) == (1, "ok")
    assert router.flights == {}


def test_reader_notes_go_to_the_trace_not_the_validator(router: Router) -> None:
    """Notes about the email are recorded, then stripped before the validator."""
    workers(router)
    message_id, _ = submit(router)
    effects = router.handle("reader", R1, Reading(message_id=message_id, answer="x", source="recorded",
                                                  notes={"subject": "hello"}), 1.0)
    (answer,) = [line for line in lines(effects) if line["event"] == "model_answer"]
    assert answer["subject"] == "hello" and answer["source"] == "recorded" and answer["stage"] == "reader"
    to_validator = sends(effects, "validator")[0].message
    assert isinstance(to_validator, Reading) and to_validator.notes == {}


@pytest.mark.parametrize(("role", "identity", "result", "rule"), [
    ("reader", R1, lambda m: Unreadable(message_id=m, rule="mail.empty_body", reason="empty"), "mail.empty_body"),
])
def test_unreadable_email_is_rejected(router: Router, role, identity, result, rule) -> None:
    """An email the reader cannot read ends rejected, with the reader's rule."""
    workers(router)
    message_id, _ = submit(router)
    (outcome,) = outcomes(router.handle(role, identity, result(message_id), 1.0))
    assert (outcome["outcome"], outcome["rule"]) == ("rejected", rule)


def test_validator_rejection_ends_the_email(router: Router) -> None:
    """A Rejected verdict ends the email as rejected and nothing reaches the actor."""
    workers(router)
    message_id, _ = submit(router)
    router.handle("reader", R1, Reading(message_id=message_id, answer="4411 bitte", source="model"), 1.0)
    effects = router.handle("validator", V, Rejected(message_id=message_id, rule="digits.pattern", reason="no"), 2.0)
    assert outcomes(effects)[0]["outcome"] == "rejected" and sends(effects, "actor") == []


def test_reader_credit_is_never_exceeded(router: Router) -> None:
    """A reader with credit 1 holds one email; the next waits until it answers."""
    workers(router)
    first, effects = submit(router, ref=1)
    second, effects2 = submit(router, ref=2)
    assert len(sends(effects, "reader")) == 1 and sends(effects2, "reader") == []
    effects = router.handle("reader", R1, Reading(message_id=first, answer="1", source="model"), 1.0)
    (next_email,) = sends(effects, "reader")
    assert sent_email(next_email).message_id == second


def test_work_is_balanced_over_readers(router: Router) -> None:
    """Two free readers each get an email before either gets a second."""
    workers(router, readers=(R1, R2))
    targets = [sends(submit(router, ref=n)[1], "reader")[0].identity for n in range(2)]
    assert sorted(targets) == [R1, R2]


def test_emails_wait_for_a_reader(router: Router) -> None:
    """With no reader connected, emails queue; a reader's Hello releases them."""
    message_id, effects = submit(router)
    assert sends(effects, "reader") == []
    effects = router.handle("reader", R1, Hello(credit=1), 1.0)
    assert sent_email(sends(effects, "reader")[0]).message_id == message_id


def test_passed_from_the_reader_endpoint_is_a_recorded_violation(router: Router) -> None:
    """A Violation is recorded with its endpoint and kind, and nothing is routed."""
    workers(router)
    effects = router.handle("reader", R1, Violation(kind="passed", reason="a reader may not send 'passed'"), 1.0)
    (line,) = lines(effects)
    assert (line["event"], line["endpoint"], line["kind"]) == ("violation", "reader", "passed")
    assert sends(effects) == [] and router.counters["violation.reader"] == 1


def test_malformed_frame_is_recorded_and_counted(router: Router) -> None:
    """Garbage becomes one trace line and a counter, nothing else."""
    effects = router.handle("actor", A, Malformed(reason="bad", size=3), 1.0)
    assert lines(effects)[0]["event"] == "malformed_frame" and router.counters["malformed.actor"] == 1


def test_result_from_a_worker_that_does_not_hold_the_email_is_ignored(router: Router) -> None:
    """A reader cannot move another reader's email (or one never sent to it)."""
    workers(router, readers=(R1, R2))
    message_id, effects = submit(router)
    holder = sends(effects, "reader")[0].identity
    other = R2 if holder == R1 else R1
    effects = router.handle("reader", other, Reading(message_id=message_id, answer="1", source="model"), 1.0)
    assert sends(effects, "validator") == [] and "late_result" in [line["event"] for line in lines(effects)]


def test_deadline_fails_the_email_once_and_late_answer_changes_nothing(settings) -> None:
    """Out of deliveries: outcome failed; the late answer is recorded but makes no second outcome."""
    router = Router(msgspec.structs.replace(settings, max_attempts=1), boot=0xABC)
    workers(router)
    message_id, _ = submit(router)
    router.handle("reader", R1, Hello(credit=1), settings.read_deadline_s)  # alive, just slow
    effects = router.tick(settings.read_deadline_s + 1)
    (outcome,) = outcomes(effects)
    assert outcome["outcome"] == "failed" and "reader" in outcome["reason"] and "1 deliveries" in outcome["reason"]
    effects = router.handle("reader", R1, Reading(message_id=message_id, answer="1", source="model"), 100.0)
    assert outcomes(effects) == [] and sends(effects, "validator") == []
    assert "late_result" in [line["event"] for line in lines(effects)]


def test_missed_deadline_is_redelivered_to_another_worker(router: Router, settings) -> None:
    """A reader that does not answer in time loses the email to another reader; the first answer loses."""
    workers(router, readers=(R1, R2))
    message_id, effects = submit(router)
    holder = sends(effects, "reader")[0].identity
    other = R2 if holder == R1 else R1
    later = settings.read_deadline_s + 1
    for role, identity in (("reader", holder), ("reader", other), ("validator", V), ("actor", A)):
        router.handle(role, identity, Hello(credit=1), later - 0.5)  # all alive, one just slow
    effects = router.tick(later)
    (again,) = [s for s in sends(effects, "reader") if isinstance(s.message, Read)]
    assert again.identity == other and sent_email(again).message_id == message_id
    assert [l["event"] for l in lines(effects)].count("redelivery") == 1
    late = router.handle("reader", holder, Reading(message_id=message_id, answer="1", source="model"), later + 1)
    assert sends(late, "validator") == []
    on_time = router.handle("reader", other, Reading(message_id=message_id, answer="1", source="model"), later + 1)
    assert len(sends(on_time, "validator")) == 1


def test_silent_idle_worker_is_buried(router: Router, settings) -> None:
    """No heartbeat for liveness x interval from a worker holding nothing: it is dropped."""
    workers(router, readers=(R1,))
    effects = router.tick(settings.heartbeat_interval_s * settings.heartbeat_liveness + 0.5)
    assert R1 not in router.workers["reader"] and "worker_lost" in [l["event"] for l in lines(effects)]


def test_lost_connection_redelivers_the_work(router: Router) -> None:
    """A busy worker whose connection is gone (the heartbeat to it bounced) loses its emails to another."""
    workers(router, readers=(R1,))
    message_id, effects = submit(router)
    (_held,) = sends(effects, "reader")
    router.handle("reader", R2, Hello(credit=1), 1.0)
    effects = router.undeliverable(Send("reader", R1, Heartbeat()), 1.5)
    (again,) = [s for s in sends(effects, "reader") if isinstance(s.message, Read)]
    assert again.identity == R2 and sent_email(again).message_id == message_id


def test_broker_sends_heartbeats(router: Router) -> None:
    """Every worker hears from the broker each interval, so it can tell a dead broker."""
    workers(router)
    beats = [s for s in sends(router.tick(5.0)) if isinstance(s.message, Heartbeat)]
    assert {(s.role, s.identity) for s in beats} == {("reader", R1), ("validator", V), ("actor", A)}


def test_accepted_emails_are_journalled_before_the_reply(router: Router) -> None:
    """The QueuedEmail comes before the Accepted in the effects, so the loop can fsync in between."""
    effects = router.handle("intake", CLIENT, Submit(ref=1, raw=b"Order 4411", format="text", sender="a@b"), 0.0)
    kinds = [type(e).__name__ for e in effects if not isinstance(e, bytes)]
    assert kinds.index("QueuedEmail") < kinds.index("Send")
    (entry,) = [e for e in effects if isinstance(e, QueuedEmail)]
    assert (entry.raw, entry.sender) == (b"Order 4411", "a@b")


def test_too_large_email_is_rejected_with_an_id(router: Router, settings) -> None:
    """An email over the size limit gets an id and a rejected outcome; no reader sees it."""
    workers(router)
    _message_id, effects = submit(router, raw=b"x" * (settings.max_email_bytes + 1))
    (outcome,) = outcomes(effects)
    assert outcome["outcome"] == "rejected" and outcome["rule"] == "intake.too_large"
    assert sends(effects, "reader") == []


def test_await_answers_finished_pending_and_unknown(router: Router) -> None:
    """Await answers at once for finished emails, later for pending ones, refuses unknown ids."""
    workers(router)
    done_id, _ = submit(router, ref=1)
    router.handle("reader", R1, Unreadable(message_id=done_id, rule="r", reason="x"), 1.0)
    pending_id, _ = submit(router, ref=2)
    effects = router.handle("intake", CLIENT, Await(ref=3, ids=[done_id, pending_id, "nope"]), 2.0)
    messages = [s.message for s in sends(effects, "intake")]
    assert Result(message_id=done_id, outcome="rejected", reason="x") in messages
    assert any(isinstance(m, Refused) and "nope" in m.reason for m in messages)
    effects = router.handle("reader", R1, Unreadable(message_id=pending_id, rule="r", reason="y"), 3.0)
    assert Result(message_id=pending_id, outcome="rejected", reason="y") \
        in [s.message for s in sends(effects, "intake")]


def test_undeliverable_work_goes_back_to_the_queue(router: Router) -> None:
    """If a reader vanished, its email is requeued for another reader, not lost."""
    workers(router, readers=(R1,))
    message_id, effects = submit(router)
    (lost,) = sends(effects, "reader")
    router.undeliverable(lost, 1.0)
    effects = router.handle("reader", R2, Hello(credit=1), 2.0)
    assert sent_email(sends(effects, "reader")[0]).message_id == message_id


def test_worker_events_are_stamped_with_the_endpoint_stage(router: Router) -> None:
    """A reader cannot write a line that claims to come from the actor."""
    effects = router.handle("reader", R1, Event(event="note", detail={"stage": "actor", "x": 1}), 0.0)
    (line,) = lines(effects)
    assert line["stage"] == "reader" and line["x"] == 1


def test_reader_notes_cannot_override_the_answer_or_source(router: Router) -> None:
    """Notes named like the broker's own fields lose to them, and nothing crashes."""
    workers(router)
    message_id, _ = submit(router)
    notes: Detail = {"answer": "forged", "source": "model", "stage": "actor", "event": "outcome"}
    effects = router.handle("reader", R1, Reading(message_id=message_id, answer="1", source="none", notes=notes), 1.0)
    (line,) = [line for line in lines(effects) if line["event"] == "model_answer"]
    assert (line["answer"], line["source"], line["stage"]) == ("1", "none", "reader")


def test_status_reports_workers_and_queue(router: Router) -> None:
    """Ping answers with connected workers per role and the queue length."""
    workers(router, readers=(R1, R2))
    (status,) = [s.message for s in sends(router.handle("intake", CLIENT, Ping(ref=9), 0.0))]
    assert isinstance(status, Status) and status.workers == {"reader": 2, "validator": 1, "actor": 1}


def test_many_emails_each_get_exactly_one_outcome(router: Router) -> None:
    """Over a mixed run, every accepted id has exactly one outcome line."""
    workers(router, readers=(R1, R2), credit=4)
    ids, effects = [], []
    for ref in range(50):
        message_id, submitted = submit(router, ref=ref)
        ids.append(message_id)
        effects += submitted
    trace_lines: list[dict] = []
    while effects:
        trace_lines += lines(effects)
        todo, effects = sends(effects), []
        for send in todo:
            message = send.message
            result: Reading | Passed | Rejected | Done
            if send.role == "reader":
                assert isinstance(message, Read)
                answer = "4411" if int(message.message_id.split("-")[1]) % 3 else "no"
                result = Reading(message_id=message.message_id, answer=answer, source="model")
            elif send.role == "validator":
                assert isinstance(message, Reading)
                result = Passed(message_id=message.message_id, value="4411") if message.answer == "4411" \
                    else Rejected(message_id=message.message_id, rule="digits.pattern", reason="no")
            elif send.role == "actor":
                assert isinstance(message, Passed)
                result = Done(message_id=message.message_id, outcome="completed")
            else:
                continue
            effects += router.handle(send.role, send.identity, result, 1.0)
    done = [line["message_id"] for line in trace_lines if line["event"] == "outcome"]
    assert sorted(done) == sorted(ids) and router.flights == {}


def test_one_poisonous_email_fails_alone(router: Router, settings) -> None:
    """A reader holding four emails dies. The four come back as suspects: each goes alone to
    a reader holding nothing. The one that kills every reader it reaches fails by itself
    after max_attempts; the three others complete."""
    router.settings = msgspec.structs.replace(settings, max_attempts=3)
    workers(router, readers=(R1,), credit=4)
    ids = [submit(router, ref=n)[0] for n in range(4)]
    assert all(ids[n] in router.workers["reader"][R1].assigned for n in range(4))
    poison = ids[1]
    dead = R1
    finished: list[dict] = []
    for attempt in range(40):
        effects = router.undeliverable(Send("reader", dead, Heartbeat()), float(attempt))  # it died
        fresh = f"r-{attempt}".encode()
        effects += router.handle("reader", fresh, Hello(credit=4), float(attempt))
        while True:
            held = sends(effects, "reader")
            assert len(held) <= 1, "a suspect never shares its reader"
            finished += outcomes(effects)
            if not held:
                break
            message_id = sent_email(held[0]).message_id
            if message_id == poison:
                dead = fresh  # this reader dies too
                break
            effects = router.handle("reader", fresh, Reading(message_id=message_id, answer="1", source="model"), 1.0)
            effects += router.handle("validator", V, Rejected(message_id=message_id, rule="r", reason="x"), 1.0)
        if len(finished) == 4:
            break
    by_id = {line["message_id"]: line["outcome"] for line in finished}
    assert by_id == {ids[0]: "rejected", poison: "failed", ids[2]: "rejected", ids[3]: "rejected"}


@pytest.mark.parametrize(("role", "identity", "message"), [
    pytest.param("actor", A, Event(event="outcome", message_id="abc-1", detail={"outcome": "completed"}),
                 id="actor-outcome"),
    pytest.param("reader", R1, Event(event="received", message_id="abc-1"), id="reader-received"),
    pytest.param("reader", R1, Event(event="verdict", message_id="abc-1", detail={"verdict": "passed"}),
                 id="reader-verdict"),
    pytest.param("intake", CLIENT, Notice(event="outcome", detail={"outcome": "failed"}), id="client-outcome"),
])
def test_peers_cannot_forge_the_brokers_own_events(router: Router, role, identity, message) -> None:
    """Recovery and scoring read received/outcome/verdict lines: a worker's Event or a
    client's Notice under such a name is a recorded violation, not a trace line of that name."""
    (line,) = lines(router.handle(role, identity, message, 0.0))
    assert (line["stage"], line["event"], line["endpoint"]) == ("broker", "violation", role)
    assert router.counters[f"violation.{role}"] == 1


def test_recovery_reads_only_the_brokers_lines(tmp_path) -> None:
    """Even a forged line in the file (say, written by hand) cannot close or reopen an email."""
    from airlock import trace

    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join([
        raw_line("broker", "received", "m-1", {}), raw_line("actor", "outcome", "m-1", {"outcome": "completed"}),
        raw_line("broker", "received", "m-2", {}), raw_line("broker", "outcome", "m-2", {"outcome": "completed"}),
        raw_line("reader", "received", "m-2", {}),
    ]))
    assert trace.states(path) == {"m-1": "open", "m-2": "final"}


def test_call_lines_name_the_plan_they_ran_under(router: Router) -> None:
    """An actor's Done names its task and plan: each step that ran records them, so a reader of a
    data dir where several tasks ran judges each call by its own plan; an older actor's Done
    (no plan) leaves them out rather than claim an empty plan."""
    workers(router)
    call = Call(step=1, server="shop", tool="lookup_order", args={"order_id": "4411"}, status="ok")
    for task, plan in (("order_status", [("shop", "lookup_order"), ("mail", "send_status")]), ("", [])):
        message_id, _ = submit(router)
        router.handle("reader", R1, Reading(message_id=message_id, answer="4411", source="model"), 1.0)
        router.handle("validator", V, Passed(message_id=message_id, value="4411"), 2.0)
        effects = router.handle("actor", A, Done(message_id=message_id, outcome="completed", calls=[call],
                                                 task=task, plan=plan), 3.0)
        (line,) = [line for line in lines(effects) if line["event"] == "step"]
        if plan:
            assert (line["task"], line["plan"]) == ("order_status", [["shop", "lookup_order"], ["mail", "send_status"]])
        else:
            assert "task" not in line and "plan" not in line


def test_await_on_an_escalated_email_tells_why_it_waits(router: Router) -> None:
    """A client that awaits an email already parked for a person hears the actor's reason
    (e.g. that another task must decide it), not a generic line."""
    workers(router)
    message_id, _ = submit(router)
    router.handle("reader", R1, Reading(message_id=message_id, answer="4411", source="model"), 1.0)
    router.handle("validator", V, Passed(message_id=message_id, value="4411"), 2.0)
    why = "escalated under the task refund_with_approval, but this airlock runs order_status; nothing ran."
    router.handle("actor", A, Done(message_id=message_id, outcome="escalated", reason=why), 3.0)
    effects = router.handle("intake", CLIENT, Await(ref=7, ids=[message_id]), 4.0)
    (result,) = [s.message for s in sends(effects, "intake")]
    assert isinstance(result, Result)
    assert (result.outcome, result.reason) == ("escalated", why)
