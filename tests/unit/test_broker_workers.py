"""broker.workers: credit granted by Hello and returned by results, liveness, and one worker
per process whatever its reconnects (alone, and through the Router)."""

from __future__ import annotations

import json

import msgspec

from airlock.wire import Heartbeat, Hello, Read, Submit
from broker.outbox import Effect, Send
from broker.router import Router
from broker.workers import MAX_CREDIT, Connection, Workers

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


def test_a_named_workers_newest_connection_replaces_the_one_known_and_an_older_one_is_stale() -> None:
    """Connection 3 replaces 2; a Hello of connection 1 read after them is stale; no name: new."""
    workers = crew()
    assert workers.connect("reader", b"c2", "w", 2) == Connection()
    workers.join("reader", b"c2", 1, 0.0, "w")
    assert workers.connect("reader", b"c3", "w", 3) == Connection(replaces=b"c2")
    assert workers.connect("reader", b"c1", "w", 1) == Connection(stale=True)
    assert workers.connect("reader", b"c3b", "w", 3) == Connection(stale=True)  # the same number again
    assert workers.connect("reader", b"x", "", 0) == Connection()
    assert workers.connect("actor", b"c1", "w", 1) == Connection()  # names are per role


def test_a_lost_connection_forgets_its_name_only_if_it_is_the_newest() -> None:
    """Losing a replaced connection keeps the name's newest; losing the newest frees the name."""
    workers = crew()
    workers.connect("reader", b"c1", "w", 1)
    workers.join("reader", b"c1", 1, 0.0, "w")
    workers.connect("reader", b"c2", "w", 2)
    workers.lose("reader", b"c1", 1.0)
    assert workers.named["reader"] == {"w": (2, b"c2")}
    workers.join("reader", b"c2", 1, 1.0, "w")
    workers.lose("reader", b"c2", 2.0)
    assert workers.named["reader"] == {}


def _sends(effects: list[Effect], role: str) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and e.role == role]


def _submit(router: Router, ref: int, now: float = 0.0) -> list[Effect]:
    return router.handle("intake", b"client", Submit(ref=ref, raw=b"Order 4411", format="text"), now)


def test_reconnects_read_in_any_order_leave_one_worker_holding_the_work(settings) -> None:
    """Five connections of one reader, their Hellos read out of order: one worker, the newest,
    and the work the replaced one held goes back without counting as a delivery."""
    router = Router(settings, boot=0xABC)
    for number in (2, 1):
        router.handle("reader", f"c{number}".encode(), Hello(credit=2, worker="w", connection=number), 0.0)
    effects = _submit(router, 1)
    assert [s.identity for s in _sends(effects, "reader")] == [b"c2"]
    effects = []
    for number in (4, 3, 5, 1):  # one turn's frames, as the loop reads them: served after, by tick
        effects += router.handle_frame("reader", f"c{number}".encode(),
                                       [Hello(credit=2, worker="w", connection=number)], 1.0, serve=False)
    effects += router.tick(1.0)
    assert list(router.workers["reader"]) == [b"c5"] and router.crew.counts()["reader"] == 1
    assert [s.identity for s in _sends(effects, "reader") if isinstance(s.message, Read)] == [b"c5"]
    assert [flight.attempts for flight in router.flights.values()] == [1]
    assert router.counters["stale_connection.reader"] == 3 and router.counters["reconnected.reader"] == 2
    assert "worker_lost.reader" not in router.counters
    events = [json.loads(line)["event"] for line in effects if isinstance(line, bytes)]
    assert events.count("worker_joined") == 0 and events.count("worker_lost") == 1  # c2 held the email


def test_work_the_socket_refused_is_no_delivery(settings) -> None:
    """Sent to three connections gone before it left (their Hellos waited at the broker), an
    email is not failed at max_attempts: the fourth, live reader gets it."""
    router = Router(msgspec.structs.replace(settings, max_attempts=3), boot=0xABC)
    effects = _submit(router, 1)
    for ghost in (b"g1", b"g2", b"g3"):
        effects = router.handle("reader", ghost, Hello(credit=1), 1.0)
        (sent,) = _sends(effects, "reader")
        effects = router.undeliverable(sent, 1.0)
    assert not [line for line in effects if isinstance(line, bytes) and b'"outcome"' in line]
    effects = router.handle("reader", b"live", Hello(credit=1), 2.0)
    (sent,) = _sends(effects, "reader")
    assert sent.identity == b"live" and [flight.attempts for flight in router.flights.values()] == [1]


def test_each_new_connection_is_greeted_once_before_work_is_served(settings) -> None:
    """greetings(): one Heartbeat to each connection joined since the last call, if still known."""
    router = Router(settings, boot=0xABC)
    router.handle_frame("reader", b"c1", [Hello(credit=1, worker="w", connection=1)], 0.0, serve=False)
    router.handle_frame("reader", b"c2", [Hello(credit=1, worker="w", connection=2)], 0.0, serve=False)
    router.handle_frame("actor", b"a", [Hello(credit=1)], 0.0, serve=False)
    router.handle_frame("actor", b"a", [Hello(credit=1)], 0.5, serve=False)  # a heartbeat: no greeting
    greeted = router.greetings()
    assert [(s.role, s.identity, type(s.message)) for s in _sends(greeted, "reader") + _sends(greeted, "actor")] \
        == [("reader", b"c2", Heartbeat), ("actor", b"a", Heartbeat)]
    assert router.greetings() == []
