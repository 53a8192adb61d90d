"""broker.unserved alone: an email waiting for a stage nobody serves ends, and shows while it waits."""

from __future__ import annotations

import collections
import json

import msgspec
import pytest

from airlock.wire import Read, Waiting
from broker.lifecycle import Flight, Lifecycle
from broker.outbox import Outbox
from broker.unserved import Unserved
from broker.workers import Workers

WAIT_S = 30.0


@pytest.fixture
def parts(settings) -> tuple[Workers, Lifecycle, Unserved]:
    settings = msgspec.structs.replace(settings, no_worker_wait_s=WAIT_S, heartbeat_interval_s=1.0,
                                       heartbeat_liveness=3)
    workers = Workers(("reader", "actor"), silent_after_s=3.0)
    life = Lifecycle(settings, ("reader", "actor"), Outbox(), collections.Counter(), remember=8)
    return workers, life, Unserved(life, workers)


def queue(life: Lifecycle, message_id: str, at: float) -> Flight:
    flight = Flight(message_id, "reader", at, queued_at=at)
    life.flights[message_id] = flight
    life.to_reader(flight, Read(message_id=message_id, raw=b"x", format="text"))
    return flight


def test_an_email_no_reader_could_take_ends_failed_after_the_wait(parts) -> None:
    _workers, life, unserved = parts
    queue(life, "m-1", 0.0)
    unserved.end(WAIT_S - 1)
    assert "m-1" in life.flights
    unserved.end(WAIT_S)
    (outcome,) = [json.loads(e) for e in life.out.take()]
    assert outcome["outcome"] == "failed" and outcome["no_worker_s"] == WAIT_S
    assert outcome["reason"].startswith("no reader was connected, or heard from, to take it for 30 s")
    assert life.counters["no_worker.reader"] == 1


def test_a_stage_heard_from_is_never_judged_and_escalations_wait(parts) -> None:
    """A reader heard from within liveness keeps its queue; an escalated email is a person's."""
    workers, life, unserved = parts
    queue(life, "m-1", 0.0)
    life.flights["m-2"] = Flight("m-2", "escalated", 0.0)
    workers.join("reader", b"r1", 1, 0.0)
    for now in range(1, 40):
        workers.seen("reader", b"r1", float(now))
        unserved.end(float(now))
    assert set(life.flights) == {"m-1", "m-2"} and life.out.take() == []


def test_status_shows_what_waits_for_no_worker_and_for_redelivery(parts) -> None:
    workers, life, unserved = parts
    assert unserved.waiting(1.0) == {}
    queue(life, "m-1", 1.0)
    flight = queue(life, "m-2", 2.0)
    flight.attempts, flight.retry_since = 1, 4.0
    assert unserved.waiting(10.0) == {"reader": Waiting(no_worker=2, no_worker_s=9.0, limit_s=WAIT_S,
                                                        redelivery=1, redelivery_s=6.0)}
    workers.join("reader", b"r1", 1, 10.0)  # served again: only the redelivery shows
    assert unserved.waiting(11.0) == {"reader": Waiting(redelivery=1, redelivery_s=7.0)}
