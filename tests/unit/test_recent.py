"""The broker's memory of finished outcomes (broker.recent): what it keeps, and that it stays bounded."""

from __future__ import annotations

import tracemalloc

import pytest

from airlock.wire import Accepted, Await, Hello, Refused, Result, Submit, Unreadable
from broker import router as router_module
from broker.recent import GENERATIONS, Recent
from broker.router import Router, Send


def test_the_last_keep_outcomes_are_always_remembered() -> None:
    """After any number of additions, each of the last `keep` keys is found with its value."""
    recent: Recent[int] = Recent(100)
    for n in range(1, 1_000):
        recent.add(f"id-{n}", n)
        assert all(recent.get(f"id-{m}") == m for m in range(max(1, n - 99), n + 1))


def test_at_most_one_generation_more_than_keep_is_held() -> None:
    """The count never passes keep + keep // GENERATIONS, and the oldest go first."""
    keep = 100
    recent: Recent[int] = Recent(keep)
    sizes = []
    for n in range(1_000):
        recent.add(f"id-{n}", n)
        sizes.append(len(recent))
    assert max(sizes) == keep + keep // GENERATIONS
    assert min(sizes[keep + keep // GENERATIONS:]) >= keep
    assert "id-0" not in recent and recent.get("id-0") is None
    assert "id-999" in recent


def test_a_key_added_again_reads_its_newest_value() -> None:
    recent: Recent[str] = Recent(8)
    recent.add("a", "first")
    recent.add("b", "x")
    recent.add("c", "x")
    recent.add("a", "second")
    assert recent.get("a") == "second"


def test_keep_below_the_generation_count_is_refused() -> None:
    with pytest.raises(ValueError, match="keep at least"):
        Recent(GENERATIONS - 1)


def test_memory_is_flat_once_full() -> None:
    """Traced memory after 20x keep additions is what it was after 2x: nothing accumulates
    (a memory that never dropped a generation, or kept a table grown by churn, fails this)."""
    keep = 4_000
    recent: Recent[tuple[str, str]] = Recent(keep)
    tracemalloc.start()
    try:
        for n in range(2 * keep):
            recent.add(f"{n:x}-{n}", ("completed", ""))
        full, _ = tracemalloc.get_traced_memory()
        peak_later = 0
        for n in range(2 * keep, 20 * keep):
            recent.add(f"{n:x}-{n}", ("completed", ""))
            if n % 500 == 0:
                peak_later = max(peak_later, tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    one_generation = full / (keep + keep // GENERATIONS) * (keep // GENERATIONS)
    assert peak_later <= full + one_generation


def test_await_long_after_many_finishes_still_answers_recent_and_refuses_forgotten(settings, monkeypatch) -> None:
    """Through the Router: with room for 40 outcomes, after 400 emails the last 40 are
    answered at once and the first is an unknown id, a typed refusal."""
    monkeypatch.setattr(router_module, "MAX_REMEMBERED", 40)
    router = Router(settings, boot=0xABC)
    router.handle("reader", b"r1", Hello(credit=1), 0.0)
    ids = []
    for ref in range(400):
        effects = router.handle("intake", b"c", Submit(ref=ref, raw=b"Order 4411", format="text"), 0.0)
        (accepted,) = [e.message for e in effects if isinstance(e, Send) and e.role == "intake"]
        assert isinstance(accepted, Accepted)
        router.handle("reader", b"r1", Unreadable(message_id=accepted.message_id, rule="r", reason="x"), 1.0)
        ids.append(accepted.message_id)
    effects = router.handle("intake", b"c", Await(ref=999, ids=[ids[0], *ids[-40:]]), 2.0)
    answers = [e.message for e in effects if isinstance(e, Send)]
    assert [a.message_id for a in answers if isinstance(a, Result)] == ids[-40:]
    (refused,) = [a for a in answers if isinstance(a, Refused)]
    assert refused.code == "unknown_id" and refused.message_id == ids[0]
