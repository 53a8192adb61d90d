"""broker.dispatch alone: ordinary work by credit; a redelivered email alone on an empty worker."""

from __future__ import annotations

import collections

import pytest

from airlock.wire import Read
from broker.dispatch import Dispatch
from broker.lifecycle import Flight, Lifecycle
from broker.outbox import Outbox, Send
from broker.workers import Workers
from tests.unit.test_router import sent_email


@pytest.fixture
def parts(settings) -> tuple[Workers, Lifecycle, Dispatch]:
    out = Outbox()
    workers = Workers(("reader",), silent_after_s=3.0)
    life = Lifecycle(settings, ("reader",), out, collections.Counter(), remember=8)
    return workers, life, Dispatch(workers, life, out)


def queue(life: Lifecycle, *ids: str) -> None:
    for message_id in ids:
        flight = Flight(message_id, "reader", 0.0)
        life.flights[message_id] = flight
        life.to_reader(flight, Read(message_id=message_id, raw=b"x", format="text"))


def placed(life: Lifecycle) -> list[tuple[bytes, str]]:
    return [(e.identity, sent_email(e).message_id) for e in life.out.take() if isinstance(e, Send)]


def test_work_goes_only_where_there_is_credit(parts) -> None:
    """Three emails, a worker with credit two: two sent, one waits; a stale one is skipped."""
    workers, life, dispatch = parts
    workers.join("reader", b"r1", 2, 0.0)
    queue(life, "m-0", "m-1", "m-2", "m-3")
    del life.flights["m-0"]  # ended while it waited
    dispatch(0.0)
    assert placed(life) == [(b"r1", "m-1"), (b"r1", "m-2")]
    assert life.flights["m-1"].worker == b"r1" and life.flights["m-3"].worker is None
    workers.returned("reader", b"r1", "m-1")
    dispatch(1.0)
    assert placed(life) == [(b"r1", "m-3")]


def test_a_suspect_goes_alone_to_an_empty_worker_and_blocks_it(parts) -> None:
    """A redelivery takes an idle worker alone; that worker gets no ordinary work until it answers."""
    workers, life, dispatch = parts
    for identity in (b"r1", b"r2"):
        workers.join("reader", identity, 2, 0.0)
    queue(life, "m-1")
    dispatch(0.0)
    (holder, _), = placed(life)
    life.redeliver(life.flights["m-1"], "lost", 1.0)
    life.out.take()
    workers.returned("reader", holder, "m-1")  # as if lost: its copy no longer counts
    queue(life, "m-2", "m-3", "m-4")
    dispatch(1.0)
    sent = placed(life)
    suspect_holder = next(i for i, m in sent if m == "m-1")
    assert workers.of["reader"][suspect_holder].suspect == "m-1"
    assert [m for i, m in sent if i == suspect_holder] == ["m-1"]  # alone
    assert sorted(m for i, m in sent if i != suspect_holder) == ["m-2", "m-3"]


def test_with_no_empty_worker_the_least_busy_drains_for_the_suspect(parts) -> None:
    """No worker is empty: the least busy takes no ordinary work until it is, then the suspect."""
    workers, life, dispatch = parts
    for identity in (b"r1", b"r2", b"r3", b"r4"):
        workers.join("reader", identity, 2, 0.0)
    queue(life, *(f"m-{n}" for n in range(8)))
    dispatch(0.0)
    assert sorted(workers.of["reader"][b"r2"].assigned) == ["m-2", "m-3"]
    life.out.take()
    workers.returned("reader", b"r2", "m-2")  # r2 now holds one: the least busy
    life.redeliver(life.flights["m-0"], "missed its deadline", 1.0)  # r1 may still hold its copy
    queue(life, "m-8")
    dispatch(1.0)
    assert dispatch.draining["reader"] == b"r2" and placed(life) == []  # m-8 does not go to r2
    workers.returned("reader", b"r2", "m-3")
    dispatch(2.0)
    assert placed(life) == [(b"r2", "m-0")] and dispatch.draining["reader"] is None
