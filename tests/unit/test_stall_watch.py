"""broker.stall: a stopped process is told from a slow one by its own late wake-ups (no clock is waited on here)."""

from __future__ import annotations

from broker.stall import StallWatch


def watch_at(start: float) -> StallWatch:
    watch = StallWatch(tick_s=0.25, stalled_s=2.0, grace_s=5.0)
    watch.beat(start)
    return watch


def test_regular_beats_are_no_stall() -> None:
    """Wake-ups on time: nothing to excuse."""
    watch = watch_at(100.0)
    for tick in range(1, 9):
        watch.beat(100.0 + tick * 0.25)
    assert watch.stalled(102.1) == 0.0


def test_an_overdue_beat_is_a_stop_in_progress() -> None:
    """Coming out of SIGSTOP before the watcher ran again: the overdue beat is the stop."""
    watch = watch_at(100.0)
    assert watch.stalled(135.0) == 35.0


def test_a_late_wake_up_excuses_failures_for_the_grace_only() -> None:
    """A 35 s gap is remembered for grace_s after it, then forgotten."""
    watch = watch_at(100.0)
    watch.beat(135.0)
    assert watch.stalled(135.1) == 35.0
    for tick in range(1, 20):  # on time again, up to 139.75
        watch.beat(135.0 + tick * 0.25)
    assert watch.stalled(139.9) == 35.0
    watch.beat(140.0)
    watch.beat(140.25)
    assert watch.stalled(140.3) == 0.0


def test_a_short_hiccup_is_not_a_stop() -> None:
    """A wake-up 1 s late (a busy machine) is under stalled_s: no excuse."""
    watch = watch_at(100.0)
    watch.beat(101.25)
    assert watch.stalled(101.3) == 0.0


def test_the_thread_starts_and_stops() -> None:
    """start() runs the watcher; stop() ends it (a daemon thread, joined)."""
    watch = StallWatch().start()
    watch.stop()
    assert not watch._thread.is_alive()
