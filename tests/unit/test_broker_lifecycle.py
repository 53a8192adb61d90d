"""broker.lifecycle alone: hand-offs, deadlines, redelivery, escalation and the one outcome."""

from __future__ import annotations

import collections
import json

import msgspec
import pytest

from airlock.wire import Read, Result
from broker.lifecycle import Flight, Lifecycle
from broker.outbox import Outbox, Send

READ_S = 60.0


@pytest.fixture
def life(settings) -> Lifecycle:
    settings = msgspec.structs.replace(settings, read_deadline_s=READ_S, max_attempts=2, queue_max_bytes=100)
    return Lifecycle(settings, ("reader", "validator", "actor"), Outbox(), collections.Counter(), remember=8)


def queued(life: Lifecycle, message_id: str = "m-1", size: int = 10) -> Flight:
    flight = Flight(message_id, "reader", 0.0, queued_at=0.0)
    life.flights[message_id] = flight
    life.to_reader(flight, Read(message_id=message_id, raw=b"x" * size, format="text"))
    return flight


def lines(life: Lifecycle) -> list[dict]:
    return [json.loads(e) for e in life.out.take() if isinstance(e, bytes)]


def test_raw_bytes_are_held_until_a_reader_has_read_them(life: Lifecycle) -> None:
    """The queue bound counts raw emails; past the reader the broker holds none; one always fits."""
    assert life.has_room(1_000)  # an empty queue takes any one email
    flight = queued(life, size=60)
    assert life.queued_bytes == 60 and life.has_room(40) and not life.has_room(41)
    life.hand_off(flight, "validator", Read(message_id="m-1", raw=b"", format="text"), 1.0)
    assert life.queued_bytes == 0 and list(life.pending["validator"])


def test_a_missed_deadline_sends_again_then_gives_up(life: Lifecycle) -> None:
    """Past its stage deadline an email goes to the retry lane; at max_attempts it ends failed."""
    flight = queued(life)
    life.delivered(flight, "reader", b"r1", 0.0)
    assert life.next_deadline() == READ_S
    life.missed_deadlines(READ_S - 1)
    assert flight.worker == b"r1" and lines(life) == []
    life.missed_deadlines(READ_S)
    (redelivery,) = lines(life)
    assert redelivery["event"] == "redelivery" and redelivery["attempt"] == 2 and flight.worker is None
    assert list(life.retry["reader"]) == [flight.message] and flight.retry_since == READ_S
    life.delivered(flight, "reader", b"r2", READ_S)
    life.missed_deadlines(2 * READ_S)
    (outcome,) = lines(life)
    assert outcome["outcome"] == "failed" and outcome["reason"].endswith("gave up after 2 deliveries")
    assert "m-1" not in life.flights and life.finished.get("m-1")[0] == "failed"


def test_a_deadline_left_behind_by_a_hand_off_does_not_count(life: Lifecycle) -> None:
    """The epoch moves at each hand-off: the reader's deadline cannot fail the validator's turn."""
    flight = queued(life)
    life.delivered(flight, "reader", b"r1", 0.0)
    life.hand_off(flight, "validator", Read(message_id="m-1", raw=b"", format="text"), 1.0)
    life.missed_deadlines(READ_S + 1)
    assert lines(life) == [] and flight.stage == "validator" and not life.retry["reader"]


def test_finish_answers_every_waiter_once_and_is_remembered(life: Lifecycle) -> None:
    flight = queued(life)
    flight.waiters = [(b"c1", 1), (b"c2", 2)]
    life.waiting.update({b"c1": 2, b"c2": 1})
    life.finish(flight, "rejected", "no", 0.5, rule="r")
    effects = life.out.take()
    (outcome,) = [json.loads(e) for e in effects if isinstance(e, bytes)]
    assert (outcome["final"], outcome["ended_at"], outcome["rule"], outcome["ms"]) == (True, "reader", "r", 500.0)
    assert [(s.identity, s.message) for s in effects if isinstance(s, Send)] == [
        (b"c1", Result(message_id="m-1", outcome="rejected", reason="no")),
        (b"c2", Result(message_id="m-1", outcome="rejected", reason="no"))]
    assert life.waiting == {b"c1": 1} and life.queued_bytes == 0 and life.counters["outcome.rejected"] == 1
    assert life.finished.get("m-1") == ("rejected", "no")


def test_an_escalated_email_waits_for_a_person_and_its_waiters_hear_so(life: Lifecycle) -> None:
    flight = queued(life)
    flight.waiters = [(b"c1", 1)]
    life.waiting[b"c1"] = 1
    life.escalate(flight, "refund over the limit", 2.0)
    effects = life.out.take()
    assert flight.stage == "escalated" and flight.waiting_for == "refund over the limit" and flight.waiters == []
    assert "m-1" in life.flights and life.waiting == {}
    assert [json.loads(e)["final"] for e in effects if isinstance(e, bytes)] == [False]


def test_a_recovered_email_keeps_the_waiters_it_gathered_on_disk(life: Lifecycle) -> None:
    """defer() makes it known (an Await waits); recover() queues it with those waiters."""
    from broker.journal import QueuedEmail

    life.defer("m-9", 1.0)
    life.flights["m-9"].waiters.append((b"c1", 7))
    life.recover(QueuedEmail("m-9", b"raw", "text", "cli", "a@b", "dkim"), 5.0)
    flight = life.flights["m-9"]
    assert flight.waiters == [(b"c1", 7)] and flight.started == 1.0 and flight.sender_proof == "dkim"
    queued = life.pending["reader"][0]
    assert life.queued_bytes == 3 and isinstance(queued, Read) and queued.message_id == "m-9"
    (recovered,) = lines(life)
    assert recovered["event"] == "recovered" and recovered["waited_on_disk"] is True
