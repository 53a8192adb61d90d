"""Deadlines (actor/deadline.py): every call cut off at its timeout. On the main thread inline
under a timer, the call itself stopped at the deadline; elsewhere on a reused thread, with a
bounded number of threads left running calls nobody waits for."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from actor.deadline import Deadlines, Overran


@pytest.fixture
def deadlines() -> Iterator[Deadlines]:
    made = Deadlines(max_overrunning=2, inline=False)  # the thread way, even on pytest's main thread
    yield made
    made.close()


def test_answers_with_the_value_or_what_the_call_raised(deadlines: Deadlines) -> None:
    """The value comes back; an exception comes back as itself, not wrapped."""
    assert deadlines.call(lambda cancelled: 42, 1.0) == 42
    with pytest.raises(KeyError, match="missing"):
        deadlines.call(lambda cancelled: dict[str, int]()["missing"], 1.0)


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
    deadlines = Deadlines(inline=False)
    worker = deadlines.call(lambda cancelled: threading.current_thread(), 1.0)
    deadlines.close()
    worker.join(2)
    assert not worker.is_alive()


# --- inline, under a timer: the actor's own loop runs on its main thread --------------------


def _alarm_left_as_found() -> bool:
    return signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_on_the_main_thread_a_call_runs_inline_and_leaves_sigalrm_as_it_was() -> None:
    """No thread hop: the call runs on the caller's thread; its value or exception comes back
    as itself, and SIGALRM is the default again with no timer armed afterwards."""
    deadlines = Deadlines()
    assert threading.current_thread() is threading.main_thread()
    assert deadlines.call(lambda cancelled: threading.get_ident(), 1.0) == threading.get_ident()
    with pytest.raises(KeyError, match="missing"):
        deadlines.call(lambda cancelled: dict[str, int]()["missing"], 1.0)
    assert _alarm_left_as_found()


def test_an_inline_call_past_its_timeout_is_stopped_there() -> None:
    """At the deadline the call is interrupted (a blocking sleep included): the caller gets
    Overran, the rest of the call never runs, its event is set, and the next call runs
    with a fresh event, on the same thread."""
    deadlines, after, told = Deadlines(), [], []

    def slow(cancelled: threading.Event) -> None:
        told.append(cancelled)
        time.sleep(10)
        after.append("ran on")

    started = time.monotonic()
    with pytest.raises(Overran, match="no result within 0.1 s"):
        deadlines.call(slow, 0.1)
    assert 0.1 <= time.monotonic() - started < 2
    assert after == [] and told[0].is_set()
    assert deadlines.call(lambda cancelled: "set" if cancelled.is_set() else "next", 1.0) == "next"
    assert _alarm_left_as_found()


def test_a_tool_that_catches_every_exception_cannot_swallow_its_deadline() -> None:
    """`except Exception` in a tool does not catch the deadline (a BaseException, like ^C)."""
    deadlines, swallowed = Deadlines(), []

    def stubborn(cancelled: threading.Event) -> str:
        while True:
            try:
                time.sleep(10)
            except Exception as exc:  # noqa: BLE001  the point of the test: a tool that swallows all
                swallowed.append(exc)

    with pytest.raises(Overran):
        deadlines.call(stubborn, 0.05)
    assert swallowed == [] and _alarm_left_as_found()


def test_a_busy_inline_call_is_cut_off_between_bytecodes() -> None:
    """Not only a blocking wait: a Python loop that never blocks is stopped too."""
    deadlines = Deadlines()

    def spin(cancelled: threading.Event) -> None:
        while True:
            pass

    started = time.monotonic()
    with pytest.raises(Overran):
        deadlines.call(spin, 0.05)
    assert time.monotonic() - started < 2 and _alarm_left_as_found()


def test_someone_elses_sigalrm_or_another_thread_means_the_thread_way() -> None:
    """Where SIGALRM is not free (a handler of another, or a timer another armed) or the
    caller is not the main thread, the call goes to a thread and another's alarm is untouched."""
    deadlines = Deadlines()
    mine = threading.get_ident()

    def handler(signum: int, frame: object) -> None:
        raise AssertionError("another's timer must not fire during the test")

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        assert deadlines.call(lambda cancelled: threading.get_ident(), 1.0) != mine
        assert signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.signal(signal.SIGALRM, previous)
    signal.setitimer(signal.ITIMER_REAL, 60)  # SIGALRM's default handler: it must not fire, nor be cancelled
    try:
        assert deadlines.call(lambda cancelled: threading.get_ident(), 1.0) != mine
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 50  # another's timer still runs, untouched
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    from_thread: list[int] = []
    other = threading.Thread(target=lambda: from_thread.append(
        deadlines.call(lambda cancelled: threading.get_ident(), 1.0) - threading.get_ident()))
    other.start()
    other.join(5)
    assert from_thread and from_thread[0] != 0  # the job ran on a tool thread, not the calling one
    deadlines.close()
    assert _alarm_left_as_found()
