"""Deadlines (actor/deadline.py): a call off the caller's thread, cut off at its timeout,
on a reused thread, with a bounded number of threads left running calls nobody waits for."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from actor.deadline import Deadlines, Overran


@pytest.fixture
def deadlines() -> Iterator[Deadlines]:
    made = Deadlines(max_overrunning=2)
    yield made
    made.close()


def test_answers_with_the_value_or_what_the_call_raised(deadlines: Deadlines) -> None:
    """The value comes back; an exception comes back as itself, not wrapped."""
    assert deadlines.call(lambda cancelled: 42, 1.0) == 42
    with pytest.raises(KeyError, match="missing"):
        deadlines.call(lambda cancelled: {}["missing"], 1.0)


def test_one_thread_serves_call_after_call(deadlines: Deadlines) -> None:
    """Calls that answer in time reuse one thread, never the caller's."""
    threads = {deadlines.call(lambda cancelled: threading.get_ident(), 1.0) for _ in range(20)}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_a_call_past_its_timeout_is_cut_off(deadlines: Deadlines) -> None:
    """The caller gets Overran at the timeout and the call is told (its event is set); the
    late answer goes nowhere; the next call runs at once on a new, uncancelled thread."""
    release, answered, told = threading.Event(), [], []

    def slow(cancelled: threading.Event) -> None:
        answered.append(release.wait(10))
        told.append(cancelled.is_set())

    started = time.monotonic()
    with pytest.raises(Overran, match="no result within 0.1 s"):
        deadlines.call(slow, 0.1)
    assert 0.1 <= time.monotonic() - started < 2
    assert deadlines.call(lambda cancelled: "next" if not cancelled.is_set() else "cancelled", 1.0) == "next"
    assert deadlines.overrunning() == 1
    release.set()
    for _ in range(200):
        if not deadlines.overrunning():
            break
        time.sleep(0.01)
    assert answered == told == [True] and deadlines.overrunning() == 0  # it ran to its end, then its thread ended


def test_threads_left_running_are_bounded(deadlines: Deadlines) -> None:
    """With max_overrunning calls still running past their timeout, a new call is not even
    started (no thread more); once they end, calls run again."""
    release, started = threading.Event(), []
    for _ in range(2):
        with pytest.raises(Overran):
            deadlines.call(lambda cancelled: release.wait(10), 0.05)
    with pytest.raises(Overran, match="not started: 2 earlier calls"):
        deadlines.call(lambda cancelled: started.append(1), 1.0)
    assert started == []
    release.set()
    for _ in range(200):
        if not deadlines.overrunning():
            break
        time.sleep(0.01)
    assert deadlines.call(lambda cancelled: "again", 1.0) == "again"


def test_close_ends_the_idle_thread() -> None:
    """close() ends the reused thread (the actor's shutdown leaves no tool thread behind)."""
    deadlines = Deadlines()
    worker = deadlines.call(lambda cancelled: threading.current_thread(), 1.0)
    deadlines.close()
    worker.join(2)
    assert not worker.is_alive()
