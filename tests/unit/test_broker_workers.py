"""broker.workers alone: credit granted by Hello and returned by results, liveness."""

from __future__ import annotations

from broker.workers import MAX_CREDIT, Workers

R1, R2 = b"r1", b"r2"


def crew() -> Workers:
    return Workers(("reader", "actor"), silent_after_s=3.0)


def test_a_hello_grants_its_credit_once_within_bounds() -> None:
    """A new worker gets one token per credit (1..MAX_CREDIT); a second Hello is a heartbeat."""
    workers = crew()
    assert workers.join("reader", R1, 3, 0.0) == 3
    assert workers.join("reader", R1, 3, 1.0) is None  # already counted
    assert workers.join("reader", R2, 0, 0.0) == 1
    assert workers.join("actor", R1, 10**9, 0.0) == MAX_CREDIT
    assert list(workers.ready["reader"]) == [R1, R1, R1, R2]
    assert workers.counts() == {"reader": 2, "actor": 1}


def test_a_result_returns_credit_only_for_what_the_worker_holds() -> None:
    """A held message's result gives its token back and clears a suspect; any other gives nothing."""
    workers = crew()
    workers.join("reader", R1, 1, 0.0)
    worker = workers.of["reader"][R1]
    workers.ready["reader"].popleft()  # dispatch took the token
    workers.assign(worker, "m-1", suspect=True)
    workers.returned("reader", R1, "m-2")  # never its own: late
    workers.returned("reader", R2, "m-1")  # not a worker
    assert not workers.ready["reader"] and worker.suspect == "m-1"
    workers.returned("reader", R1, "m-1")
    assert list(workers.ready["reader"]) == [R1] and worker.assigned == set() and worker.suspect is None
    workers.returned("reader", R1, "m-1")  # a duplicate returns nothing more
    assert list(workers.ready["reader"]) == [R1]


def test_only_a_silent_idle_worker_is_gone() -> None:
    """Silence past silent_after_s buries an idle worker; a busy one is left to its deadline."""
    workers = crew()
    workers.join("reader", R1, 1, 0.0)
    workers.join("reader", R2, 1, 0.0)
    workers.assign(workers.of["reader"][R2], "m-1", suspect=False)
    workers.seen("intake", b"client", 9.0)  # a client's role has no workers: nothing happens
    assert workers.silent_idle(3.0) == []
    assert workers.silent_idle(3.5) == [("reader", R1)]
    workers.seen("reader", R1, 3.4)
    assert workers.silent_idle(3.5) == []


def test_a_stage_is_unserved_since_its_last_worker_left_or_fell_silent() -> None:
    """No worker: since the last left (0.0 if none ever came); all silent: since the last frame."""
    workers = crew()
    assert workers.unserved_since("reader", 5.0) == 0.0
    workers.join("reader", R1, 1, 1.0)
    workers.join("reader", R2, 1, 2.0)
    assert workers.unserved_since("reader", 4.0) is None
    assert workers.unserved_since("reader", 5.5) == 2.0  # R2 was heard last, 3.5 s ago
    assert workers.lose("reader", R1, 6.0) is not None and workers.left_at["reader"] == 0.0
    assert workers.lose("reader", R2, 7.0) is not None and workers.left_at["reader"] == 7.0
    assert workers.lose("reader", R2, 8.0) is None
    assert workers.unserved_since("reader", 9.0) == 7.0


def test_copies_held_and_everyone_cover_every_role() -> None:
    workers = crew()
    workers.join("reader", R1, 2, 0.0)
    workers.join("actor", R2, 2, 0.0)
    workers.assign(workers.of["reader"][R1], "m-1", suspect=False)
    workers.assign(workers.of["actor"][R2], "m-2", suspect=False)
    assert workers.copies_held() == {"m-1", "m-2"}
    assert list(workers.everyone()) == [("reader", R1), ("actor", R2)]
