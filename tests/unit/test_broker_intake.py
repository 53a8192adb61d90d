"""broker.intake alone: each client request gets one typed answer, bounded before anything is kept."""

from __future__ import annotations

import collections

import msgspec
import pytest

from airlock.senders import SenderProof
from airlock.wire import Accepted, Await, Decide, Decision, Ping, Read, Refused, Result, Status, Submit
from broker.intake import Intake
from broker.journal import QueuedEmail
from broker.lifecycle import Lifecycle
from broker.outbox import Outbox, Send
from broker.unserved import Unserved
from broker.workers import Workers

CLIENT, SMTP_KEY, ANN_KEY = b"c", "smtp-key", "ann-key"


@pytest.fixture
def intake(settings) -> Intake:
    settings = msgspec.structs.replace(settings, queue_max_bytes=100, max_email_bytes=80, await_max_ids=3,
                                       await_max_waiters=1)
    out, counters = Outbox(), collections.Counter[str]()
    workers = Workers(("reader", "validator", "actor"), silent_after_s=3.0)
    life = Lifecycle(settings, ("reader", "validator", "actor"), out, counters, remember=8)
    return Intake(settings, life, workers, Unserved(life, workers), out, counters, prefix="abc", max_queued=2,
                  approvers={ANN_KEY: "ann"}, smtp_keys=[SMTP_KEY])


def submit(intake: Intake, raw: bytes = b"x" * 10, key: str = "", proof: SenderProof = "none") -> list:
    intake.submit("intake", CLIENT, Submit(ref=1, raw=raw, format="text", sender="a@b", sender_proof=proof), 0.0, key)
    return intake.out.take()


def replies(effects: list) -> list:
    return [e.message for e in effects if isinstance(e, Send)]


def test_an_accepted_email_is_journalled_before_its_accepted_and_queued(intake: Intake) -> None:
    effects = submit(intake)
    kinds = [type(e).__name__ if not isinstance(e, Send) else type(e.message).__name__ for e in effects]
    assert kinds == ["bytes", "QueuedEmail", "Accepted"]
    assert replies(effects) == [Accepted(ref=1, message_id="abc-1")]
    queued = intake.lifecycle.pending["reader"][0]
    assert isinstance(queued, Read) and queued.message_id == "abc-1" and intake.lifecycle.queued_bytes == 10


def test_refusals_come_before_an_id_is_given(intake: Intake) -> None:
    """disk_full, then queue_full (count or bytes): refused, typed, and no id consumed."""
    intake.disk_full = "cannot write the journal: ENOSPC"
    assert [r.code for r in replies(submit(intake))] == ["disk_full"]
    intake.disk_full = ""
    submit(intake, b"x" * 60)
    assert [r.code for r in replies(submit(intake, b"x" * 50))] == ["queue_full"]
    submit(intake, b"x" * 40)
    assert [r.code for r in replies(submit(intake))] == ["queue_full"]  # max_queued is 2
    assert list(intake.lifecycle.flights) == ["abc-1", "abc-2"]


def test_a_too_large_email_is_accepted_then_rejected_never_journalled(intake: Intake) -> None:
    effects = submit(intake, b"x" * 81)
    assert not any(isinstance(e, QueuedEmail) for e in effects) and intake.lifecycle.flights == {}
    finished = intake.lifecycle.finished.get("abc-1")
    assert finished is not None and finished[0] == "rejected"


def test_a_sender_proof_is_kept_from_the_smtp_key_only(intake: Intake) -> None:
    submit(intake, key=SMTP_KEY, proof="dkim")
    submit(intake, key="another", proof="dkim")
    flights = intake.lifecycle.flights
    assert (flights["abc-1"].sender_proof, flights["abc-2"].sender_proof) == ("dkim", "none")
    assert intake.counters["violation.intake"] == 1


def test_awaits_are_bounded_per_request_and_per_client(intake: Intake) -> None:
    submit(intake, b"x")
    submit(intake, b"x")
    intake.await_("intake", CLIENT, Await(ref=5, ids=["a", "b", "c", "d"]), 0.0)
    assert [r.code for r in replies(intake.out.take())] == ["too_many_ids"]
    intake.await_("intake", CLIENT, Await(ref=6, ids=["abc-1", "abc-2"]), 0.0)
    assert [r.code for r in replies(intake.out.take())] == ["too_many_waiters"]
    intake.await_("intake", CLIENT, Await(ref=7, ids=["abc-1", "abc-1", "nope"]), 0.0)
    (unknown,) = replies(intake.out.take())
    assert unknown == Refused(ref=7, reason="unknown message id nope", message_id="nope", code="unknown_id")
    assert intake.lifecycle.waiting == {CLIENT: 1}
    intake.lifecycle.finish(intake.lifecycle.flights["abc-1"], "completed", "done", 1.0)
    assert replies(intake.out.take()) == [Result(message_id="abc-1", outcome="completed", reason="done")]
    intake.await_("intake", CLIENT, Await(ref=8, ids=["abc-1"]), 2.0)  # remembered
    assert replies(intake.out.take()) == [Result(message_id="abc-1", outcome="completed", reason="done")]


def test_a_decision_counts_only_from_the_persons_own_key(intake: Intake) -> None:
    submit(intake)
    flight = intake.lifecycle.flights["abc-1"]
    intake.lifecycle.escalate(flight, "refund", 1.0)
    intake.out.take()
    decide = Decide(ref=2, message_id="abc-1", approve=True, role="manager", by="ann")
    intake.decide("intake", CLIENT, decide, 2.0, SMTP_KEY)
    assert isinstance(replies(intake.out.take())[0], Refused) and flight.stage == "escalated"
    intake.decide("intake", CLIENT, decide, 2.0, ANN_KEY)
    assert replies(intake.out.take()) == [Accepted(ref=2, message_id="abc-1")]
    assert flight.stage == "actor" and isinstance(flight.message, Decision) and flight.message.by == "ann"


def test_a_ping_is_answered_with_the_status(intake: Intake) -> None:
    submit(intake)
    intake.ping("intake", CLIENT, Ping(ref=9), 1.0)
    (status,) = replies(intake.out.take())
    assert isinstance(status, Status) and status.queued == 1 and status.in_flight == 1
    assert status.workers == {"reader": 0, "validator": 0, "actor": 0}
