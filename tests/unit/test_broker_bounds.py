"""The broker's part: hostile input bounded in bytes and counts, worker trace lines
kept in their namespace, late results that change nothing, poison emails that fail alone."""

from __future__ import annotations

import collections
import time

import msgspec
import pytest

from airlock.wire import Await, Event, Hello, Passed, Read, Reading, Refused, Rejected, Submit
from broker.router import Router, Send
from tests.unit.test_router import CLIENT, R1, A, V, lines, outcomes, sends, sent_email, submit, workers


@pytest.fixture
def router(settings) -> Router:
    return Router(settings, boot=0xABC)


# --- point 3: the queue is bounded in bytes -----------------------------------------------------


def test_queue_is_bounded_in_bytes_and_refusal_says_retry(settings) -> None:
    """With no reader, 255 KB emails are accepted until AIRLOCK_QUEUE_MAX_BYTES, then refused
    with code queue_full; a reader taking emails frees room for more."""
    router = Router(msgspec.structs.replace(settings, queue_max_bytes=1024 * 1024), boot=0xABC)
    raw = b"x" * (255 * 1024)
    answers = [sends(router.handle("intake", CLIENT, Submit(ref=n, raw=raw, format="text"), 0.0), "intake")[0].message
               for n in range(10)]
    accepted = [a for a in answers if not isinstance(a, Refused)]
    refused = [a for a in answers if isinstance(a, Refused)]
    assert len(accepted) == 4 and len(refused) == 6
    assert all(r.code == "queue_full" and "retry" in r.reason for r in refused)
    assert router.queued_bytes == 4 * len(raw) <= 1024 * 1024
    effects = router.handle("reader", R1, Hello(credit=1), 1.0)
    (email,) = [sent_email(s) for s in sends(effects, "reader")]
    router.handle("reader", R1, Reading(message_id=email.message_id, answer="1", source="model"), 2.0)
    assert router.queued_bytes == 3 * len(raw)
    answer = sends(router.handle("intake", CLIENT, Submit(ref=99, raw=raw, format="text"), 3.0), "intake")[0]
    assert not isinstance(answer.message, Refused)


def test_queued_bytes_are_released_by_every_end(router: Router) -> None:
    """An email that ends at the reader (unreadable, failed) gives its bytes back."""
    from airlock.wire import Unreadable

    workers(router)
    message_id, _ = submit(router, raw=b"y" * 1000)
    assert router.queued_bytes == 1000
    router.handle("reader", R1, Unreadable(message_id=message_id, rule="r", reason="x"), 1.0)
    assert router.queued_bytes == 0


# --- point 11: Await amplification ---------------------------------------------------------------


def test_await_with_too_many_ids_is_refused_at_once(router: Router, settings) -> None:
    """8 Awaits of 250,000 ids each: each is one typed refusal, no waiters, no per-id line, fast."""
    workers(router)
    ids = [submit(router, ref=n)[0] for n in range(3)]
    huge = ids * 83_334
    started = time.perf_counter()
    effects = []
    for ref in range(8):
        effects += router.handle("intake", CLIENT, Await(ref=ref, ids=huge[:250_000]), 1.0)
    elapsed = time.perf_counter() - started
    answers = [s.message for s in sends(effects, "intake")]
    assert len(answers) == 8 and all(isinstance(a, Refused) and a.code == "too_many_ids" for a in answers)
    assert all(not flight.waiters for flight in router.flights.values())
    assert len(lines(effects)) <= 8 and elapsed < 1.0


def test_waiters_per_client_are_bounded(settings) -> None:
    """A client may wait on at most AIRLOCK_AWAIT_MAX_WAITERS ids; past it, a typed refusal;
    answered ids free room again, and another client has its own allowance."""
    router = Router(msgspec.structs.replace(settings, await_max_waiters=5, await_max_ids=100), boot=0xABC)
    workers(router)
    ids = [submit(router, ref=n)[0] for n in range(6)]
    ok = sends(router.handle("intake", CLIENT, Await(ref=1, ids=ids[:4]), 1.0), "intake")
    assert ok == []
    (refused,) = [s.message for s in sends(router.handle("intake", CLIENT, Await(ref=2, ids=ids[4:6]), 1.0))]
    assert isinstance(refused, Refused) and refused.code == "too_many_waiters"
    assert sends(router.handle("intake", b"other", Await(ref=3, ids=ids[4:6]), 1.0)) == []
    # the same id twice is one waiter
    assert sends(router.handle("intake", CLIENT, Await(ref=4, ids=[ids[4], ids[4]]), 1.0)) == []
    assert router.waiting[CLIENT] == 5


def test_an_answered_await_frees_its_waiter(settings) -> None:
    """Once an outcome is sent, the client's count drops, so a long-lived client never runs out."""
    from airlock.wire import Unreadable

    router = Router(msgspec.structs.replace(settings, await_max_waiters=1), boot=0xABC)
    workers(router)
    first, _ = submit(router, ref=1)
    second, _ = submit(router, ref=2)
    router.handle("intake", CLIENT, Await(ref=3, ids=[first]), 1.0)
    router.handle("reader", R1, Unreadable(message_id=first, rule="r", reason="x"), 2.0)
    assert router.waiting[CLIENT] == 0
    assert sends(router.handle("intake", CLIENT, Await(ref=4, ids=[second]), 3.0)) == []


# --- point 12: worker events are namespaced and escaped; late results change nothing ---------------


@pytest.mark.parametrize("name", ["violation", "malformed_frame", "note", "model_call"])
def test_worker_events_are_namespaced(router: Router, name: str) -> None:
    """A worker's Event never takes a broker event's name: it is written as worker.<name>."""
    (line,) = lines(router.handle("reader", R1, Event(event=name, detail={"x": 1}), 0.0))
    assert (line["stage"], line["event"], line["x"]) == ("reader", f"worker.{name}", 1)


@pytest.mark.parametrize("name", ["\x1b[2Jviolation", "outcome\n", "", "x" * 65, "Violation", "a b"])
def test_worker_event_names_outside_the_pattern_are_violations(router: Router, name: str) -> None:
    """A name with control characters (or any name outside [a-z][a-z0-9_]{0,63}) is a recorded
    violation that shows the name escaped, never a line of that name."""
    (line,) = lines(router.handle("actor", A, Event(event=name), 0.0))
    assert (line["stage"], line["event"], line["endpoint"]) == ("broker", "violation", "actor")
    assert "\x1b" not in line["reason"] and "\n" not in line["reason"]


def test_worker_event_details_are_escaped(router: Router) -> None:
    """Control and bidi characters in a worker's detail keys and values reach the trace escaped."""
    (line,) = lines(router.handle("reader", R1, Event(event="note", detail={"k\x1b": "a\x1b[31mb\u202e"}), 0.0))
    assert line["k\\x1b"] == "a\\x1b[31mb\\u202e"


def test_a_late_passed_changes_nothing_for_a_finished_email(router: Router) -> None:
    """After an email is final, a validator's Passed for it writes no verdict line (the page
    reads those) and sends nothing: only a late_result line."""
    workers(router)
    message_id, _ = submit(router)
    router.handle("reader", R1, Reading(message_id=message_id, answer="x", source="model"), 1.0)
    router.handle("validator", V, Rejected(message_id=message_id, rule="digits.pattern", reason="no"), 2.0)
    effects = router.handle("validator", V, Passed(message_id=message_id, value="4411"), 3.0)
    assert [line["event"] for line in lines(effects)] == ["late_result"]
    assert sends(effects) == [] and outcomes(effects) == []


def test_a_late_reading_writes_no_model_answer(router: Router) -> None:
    """A Reading for an email the reader no longer holds writes only late_result."""
    workers(router)
    message_id, _ = submit(router)
    router.handle("reader", R1, Reading(message_id=message_id, answer="1", source="model"), 1.0)
    effects = router.handle("reader", R1, Reading(message_id=message_id, answer="forged", source="model"), 2.0)
    assert [line["event"] for line in lines(effects)] == ["late_result"]


# --- point 2: poison emails fail after a few deliveries without delaying the others ----------------


def _run(router: Router, poison: set[str], readers: int, ordinary: list[str], restart_ticks: int) -> dict:
    """Virtual time: a reader answers an ordinary email in one tick; one handed a poison email
    dies (its connection is found gone next tick) and comes back as a new reader
    `restart_ticks` later. Returns each email's outcome and the tick of its outcome."""
    alive = {f"r{n}".encode() for n in range(readers)}
    born = readers
    holding: dict[bytes, list[str]] = collections.defaultdict(list)
    dying: list[bytes] = []
    coming: list[int] = []
    ended: dict[str, tuple[str, int]] = {}
    effects: list = []
    for identity in alive:
        effects += router.handle("reader", identity, Hello(credit=1), 0.0)
    for tick in range(1, 400):
        for send in sends(effects, "reader"):
            if isinstance(send.message, Read) and send.identity in alive:
                holding[send.identity].append(send.message.message_id)
        for send in sends(effects, "validator"):
            assert isinstance(send.message, Reading)
            effects_v = router.handle("validator", V, Rejected(message_id=send.message.message_id, rule="r",
                                                               reason="x"), float(tick))
            for line in outcomes(effects_v):
                ended.setdefault(line["message_id"], (line["outcome"], tick))
        for line in outcomes(effects):
            ended.setdefault(line["message_id"], (line["outcome"], tick))
        effects = []
        for identity in dying:
            effects += router.undeliverable(Send("reader", identity, Read(message_id="-", raw=b"", format="text")),
                                            float(tick))
        dying = []
        for identity in sorted(alive):
            for message_id in holding.pop(identity, []):
                if message_id in poison:
                    alive.discard(identity)
                    dying.append(identity)
                    coming.append(tick + restart_ticks)
                    break
                effects += router.handle("reader", identity, Reading(message_id=message_id, answer="1",
                                                                     source="model"), float(tick))
        for due in [t for t in coming if t <= tick]:
            coming.remove(due)
            identity = f"r{born}".encode()
            born += 1
            alive.add(identity)
            effects += router.handle("reader", identity, Hello(credit=1), float(tick))
        if len(ended) == len(poison) + len(ordinary):
            break
    return ended


def test_poison_emails_fail_after_few_deliveries_and_others_are_not_delayed(settings) -> None:
    """Three emails that kill every reader they reach, ahead of 40 ordinary ones, with two
    readers: each poison email ends failed after max_attempts (3) deliveries, and ordinary mail
    is not held up by the redeliveries: they never go ahead of it, and suspects may hold at
    most half the live readers."""
    router = Router(msgspec.structs.replace(settings, max_attempts=3, read_deadline_s=1e6), boot=0xABC)
    router.handle("validator", V, Hello(credit=64), 0.0)
    poison = {submit(router, ref=n)[0] for n in range(3)}
    ordinary = [submit(router, ref=10 + n)[0] for n in range(40)]
    ended = _run(router, poison, readers=2, ordinary=ordinary, restart_ticks=30)
    assert {ended[p][0] for p in poison} == {"failed"}
    assert all(ended[o][0] == "rejected" for o in ordinary)
    # No one can tell a poison email before it kills: the three first deliveries cost at most
    # two restart cycles (30 ticks each) of both readers. After that, suspects hold at most
    # one of the two readers, so ordinary mail always has one: 40 ticks of work. The old
    # broker (redeliveries at the front, waiting for an empty reader) took 161 ticks.
    assert max(ended[o][1] for o in ordinary) <= 2 * 30 + 40 + 10, max(ended[o][1] for o in ordinary)
    assert router.queued_bytes == 0 and router.flights == {}


def test_a_late_passed_does_not_change_an_escalated_email_on_the_page(router: Router) -> None:
    """The broker's lines, fed to the page: a validator's late Passed with another value for
    an email already with the actor (here escalated) leaves the card's verdict as it was."""
    from airlock.wire import Done
    from dashboard.state import Board

    workers(router)
    router.handle("validator", b"v2", Hello(credit=8), 0.0)
    message_id, effects = submit(router)
    effects += router.handle("reader", R1, Reading(message_id=message_id, answer="4411", source="model"), 1.0)
    effects += router.handle("validator", V, Passed(message_id=message_id, value="4411"), 2.0)
    effects += router.handle("actor", A, Done(message_id=message_id, outcome="escalated", reason="a person"), 3.0)
    effects += router.handle("validator", b"v2", Passed(message_id=message_id, value="9999"), 4.0)
    board = Board([("shop", "lookup_order"), ("mail", "send_status")])
    for line in lines(effects):
        board.apply(line)
    card = board.cards[message_id]
    assert card["verdict"]["value"] == "4411"


def test_a_worker_emptied_for_a_suspect_takes_ordinary_work_again(settings) -> None:
    """A busy reader stops taking ordinary mail so a suspect can have it alone; once no
    suspect waits (they ended meanwhile), it takes ordinary mail again, never idles for good."""
    from airlock.wire import Unreadable

    router = Router(msgspec.structs.replace(settings, max_attempts=3), boot=0xABC)
    for identity in (b"r1", b"r2", b"r3", b"r4"):
        router.handle("reader", identity, Hello(credit=2), 0.0)
    ids = [submit(router, ref=n)[0] for n in range(8)]  # every reader holds two
    holder = next(i for i, w in router.workers["reader"].items() if ids[0] in w.assigned)
    router.undeliverable(Send("reader", holder, Hello(credit=1)), 1.0)  # its two come back as suspects
    other = next(i for i in router.workers["reader"] if i != holder)
    answered = min(router.workers["reader"][other].assigned)
    router.handle("reader", other, Unreadable(message_id=answered, rule="r", reason="x"), 2.0)
    assert router.dispatch.draining["reader"] == other  # no reader is empty: the least busy empties
    for message_id in [m for m in ids if m in router.flights and router.flights[m].worker is None]:
        router.lifecycle.finish(router.flights[message_id], "failed", "ended another way", 3.0)
    new, effects = submit(router, ref=99)
    assert router.dispatch.draining["reader"] is None
    assert [s.identity for s in sends(effects, "reader") if s.message.message_id == new] == [other]


@pytest.mark.parametrize("name", ["violation", "malformed_frame", "worker_lost"])
def test_a_client_notice_cannot_take_a_broker_event_name(router: Router, name: str) -> None:
    """A Notice is written under its own name (stage supervisor), so the broker's names,
    violation included, are refused to it."""
    from airlock.wire import Notice

    (line,) = lines(router.handle("intake", CLIENT, Notice(event=name), 0.0))
    assert (line["stage"], line["event"], line["endpoint"]) == ("broker", "violation", "intake")


def test_a_lone_reader_takes_a_suspect_once_it_has_waited_a_deadline(settings) -> None:
    """One reader and a steady stream of ordinary mail: a redelivered email waits behind it,
    but not past one read deadline; then it has the reader alone."""
    router = Router(msgspec.structs.replace(settings, max_attempts=3), boot=0xABC)
    deadline = settings.read_deadline_s
    router.handle("reader", R1, Hello(credit=1), 0.0)
    suspect, _ = submit(router, ref=0)
    router.undeliverable(Send("reader", R1, Hello(credit=1)), 1.0)  # R1 died holding it
    submit(router, ref=1)  # ordinary mail already waits when the next reader comes
    effects = router.handle("reader", b"r2", Hello(credit=1), 1.0)
    ref, now, got = 2, 1.0, []
    while now < 1.0 + 2 * deadline and suspect not in got:
        effects += submit(router, ref=ref)[1]  # always more ordinary mail waiting
        got = [sent_email(s).message_id for s in sends(effects, "reader")]
        for message_id in got:
            if message_id != suspect:
                router.handle("reader", b"r2", Hello(credit=1), now)  # alive
                effects = router.handle("reader", b"r2", Reading(message_id=message_id, answer="1",
                                                                 source="model"), now)
        ref, now = ref + 1, now + 1.0
    assert suspect in got and now <= 1.0 + deadline + 2
