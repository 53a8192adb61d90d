"""Stuck states are visible and bounded: an email waiting for a stage
with no worker connected shows in Status and ends `failed` after AIRLOCK_NO_WORKER_WAIT_S."""

from __future__ import annotations

import json

import msgspec
import pytest

from airlock import settings as settings_module
from airlock.errors import SettingsError
from airlock.wire import (
    Accepted,
    Await,
    Call,
    Decide,
    Done,
    Heartbeat,
    Hello,
    Message,
    Passed,
    Ping,
    Reading,
    Result,
    Status,
    Submit,
    Waiting,
    outbound_decoder,
)
from broker.router import Router, Send

R, V, A, A2, CLIENT = b"r", b"v", b"a", b"a2", b"c"
WAIT_S = 300.0


@pytest.fixture
def router(settings) -> Router:
    return Router(msgspec.structs.replace(settings, no_worker_wait_s=WAIT_S), boot=0xABC)


def sends(effects, role: str) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and e.role == role]


def outcomes(effects) -> list[dict]:
    return [line for line in map(json.loads, [e for e in effects if isinstance(e, bytes)])
            if line["event"] == "outcome"]


def to_actor(router: Router, now: float = 0.0, ref: int = 1, await_it: bool = True) -> str:
    """One email through reader and validator: it is handed to the actor stage at `now`."""
    effects = router.handle("intake", CLIENT, Submit(ref=ref, raw=b"Order 4411", format="text"), now)
    (accepted,) = [s.message for s in sends(effects, "intake") if isinstance(s.message, Accepted)]
    message_id = accepted.message_id
    router.handle("reader", R, Reading(message_id=message_id, answer="4411", source="model"), now)
    router.handle("validator", V, Passed(message_id=message_id, value="4411"), now)
    if await_it:
        router.handle("intake", CLIENT, Await(ref=ref + 1000, ids=[message_id]), now)
    return message_id


def join(router: Router, *roles: tuple[str, bytes], now: float = 0.0, credit: int = 8) -> None:
    for role, identity in roles:
        router.handle(role, identity, Hello(credit=credit), now)


def status(router: Router, now: float) -> Status:
    (reply,) = [s.message for s in sends(router.handle("intake", CLIENT, Ping(ref=7), now), "intake")]
    assert isinstance(reply, Status)
    return reply


def keep_alive(router: Router, now: float) -> None:
    """Reader and validator say they are alive, so only the actor's absence counts."""
    join(router, ("reader", R), ("validator", V), now=now)


def test_an_email_held_by_a_killed_actor_ends_failed_after_the_wait(router: Router) -> None:
    """The compose case: the actor dies holding emails and nothing restarts it; they must
    not wait, redelivered to no one, with no deadline and no outcome, for ever."""
    join(router, ("reader", R), ("validator", V), ("actor", A))
    message_id = to_actor(router)
    assert router.flights[message_id].worker == A
    router.undeliverable(Send("actor", A, Heartbeat()), 5.0)  # the heartbeat to it bounced: gone
    for now in (6.0, 5.0 + WAIT_S - 1):
        keep_alive(router, now)
        assert outcomes(router.tick(now)) == []
    keep_alive(router, 5.0 + WAIT_S)
    effects = router.tick(5.0 + WAIT_S)
    (outcome,) = outcomes(effects)
    assert outcome["outcome"] == "failed" and outcome["ended_at"] == "actor"
    assert "no actor was connected" in outcome["reason"] and "AIRLOCK_NO_WORKER_WAIT_S" in outcome["reason"]
    assert "delivered 1 times before (its actor was lost" in outcome["reason"] and outcome["no_worker_s"] == WAIT_S
    (result,) = [s.message for s in sends(effects, "intake")]  # whoever awaits it hears it at once
    assert isinstance(result, Result) and result.message_id == message_id and result.outcome == "failed"
    assert message_id not in router.flights and router.counters["no_worker.actor"] == 1


def test_an_email_no_actor_ever_took_ends_failed_and_a_late_actor_never_runs_it(router: Router) -> None:
    """Handed to a stage no worker ever joined: failed after the wait, and an actor that
    connects later is never sent it (its side effects cannot run after the outcome)."""
    keep_alive(router, 0.0)
    message_id = to_actor(router, now=10.0)
    keep_alive(router, 10.0 + WAIT_S)
    (outcome,) = outcomes(router.tick(10.0 + WAIT_S))
    assert outcome["message_id"] == message_id and outcome["outcome"] == "failed"
    effects = router.handle("actor", A, Hello(credit=8), 10.0 + WAIT_S + 1)
    assert sends(effects, "actor") == []
    # A Done for it anyway (say an actor it reached before) is a late_result, not a second outcome.
    call = Call(step=1, server="shop", tool="lookup_order", args={"order_id": "4411"}, status="ok")
    effects = router.handle("actor", A, Done(message_id=message_id, outcome="completed", calls=[call]), WAIT_S + 20)
    assert outcomes(effects) == [] and router.counters["late.actor"] == 1


def test_status_shows_what_waits_with_no_worker_and_for_how_long(router: Router) -> None:
    """Status names the stage, how many wait, the longest wait and the limit; before, it
    showed nothing but a worker count of 0 beside an in-flight count."""
    keep_alive(router, 0.0)
    to_actor(router, now=0.0, ref=1)
    to_actor(router, now=40.0, ref=2)
    keep_alive(router, 100.0)
    reply = status(router, 100.0)
    assert reply.waiting == {"actor": Waiting(no_worker=2, no_worker_s=100.0, limit_s=WAIT_S)}
    assert reply.workers["actor"] == 0 and reply.in_flight == 2


def test_status_shows_emails_waiting_to_be_sent_again(router: Router, settings) -> None:
    """An email whose actor missed its deadline waits for a redelivery: Status says so,
    with how long, while the only actor (still holding the first delivery) is connected."""
    join(router, ("reader", R), ("validator", V))
    join(router, ("actor", A), credit=1)
    to_actor(router, now=0.0)
    late = settings.act_deadline_s + 1
    join(router, ("reader", R), ("validator", V), ("actor", A), now=late)
    router.tick(late)
    reply = status(router, late + 2)
    assert reply.waiting == {"actor": Waiting(redelivery=1, redelivery_s=2.0)}
    assert reply.counters["redelivered.actor"] == 1


def test_a_connected_busy_actor_is_not_judged_by_the_no_worker_wait(router: Router, settings) -> None:
    """With an actor connected but holding its whole credit, waiting emails wait their
    turn: only its own deadlines judge what it holds, never AIRLOCK_NO_WORKER_WAIT_S."""
    router = Router(msgspec.structs.replace(router.settings, act_deadline_s=10 * WAIT_S), boot=0xABC)
    join(router, ("reader", R), ("validator", V))
    join(router, ("actor", A), credit=1)
    held = to_actor(router, now=0.0, ref=1)
    queued = to_actor(router, now=0.0, ref=2)
    assert router.flights[held].worker == A and router.flights[queued].worker is None
    for now in (WAIT_S, 2 * WAIT_S + 1):
        join(router, ("reader", R), ("validator", V), ("actor", A), now=now)
        assert outcomes(router.tick(now)) == []
    assert status(router, 2 * WAIT_S + 1).waiting == {}


def test_a_paused_actor_counts_as_none_once_silent(router: Router, settings) -> None:
    """An actor that stops answering (SIGSTOP, hung) is never buried while it holds work:
    before, what waited behind it waited for ever. Now that wait counts from when it was
    last heard from and ends failed. What it was sent is not ended so (it could act on it
    when it runs again, after the outcome): its deadline takes it back, it shows as waiting
    to be sent again, and goes to the actor once it answers."""
    join(router, ("reader", R), ("validator", V))
    join(router, ("actor", A), credit=1)
    held = to_actor(router, now=0.0, ref=1)
    queued = to_actor(router, now=0.0, ref=2)
    keep_alive(router, settings.act_deadline_s)
    router.tick(settings.act_deadline_s)  # the deadline takes `held` back; the silent actor still holds it
    assert router.flights[held].worker is None and A in router.workers["actor"]
    assert status(router, WAIT_S - 1).waiting["actor"] == Waiting(
        no_worker=1, no_worker_s=WAIT_S - 1, limit_s=WAIT_S, redelivery=1,
        redelivery_s=WAIT_S - 1 - settings.act_deadline_s)
    keep_alive(router, WAIT_S)
    (ended,) = outcomes(router.tick(WAIT_S))
    assert ended["message_id"] == queued and "no actor was connected, or heard from" in ended["reason"]
    keep_alive(router, 10 * WAIT_S)
    assert outcomes(router.tick(10 * WAIT_S)) == [] and held in router.flights
    # It runs again: its answer to the first delivery is late, and the email goes to it again
    # (the actor's idempotency key makes that a replay), then ends once.
    effects = router.handle("actor", A, Done(message_id=held, outcome="completed"), 10 * WAIT_S + 1)
    assert outcomes(effects) == [] and router.counters["late.actor"] == 1
    (again,) = [s.message for s in sends(effects, "actor")]
    assert isinstance(again, Passed) and again.message_id == held
    (final,) = outcomes(router.handle("actor", A, Done(message_id=held, outcome="completed"), 10 * WAIT_S + 2))
    assert final["outcome"] == "completed"


def test_the_wait_counts_from_when_the_last_worker_left(router: Router) -> None:
    """An email that waited behind a busy actor does not fail the moment that actor goes:
    its no-worker wait starts then."""
    join(router, ("reader", R), ("validator", V))
    join(router, ("actor", A), credit=1)
    to_actor(router, now=0.0, ref=1)
    queued = to_actor(router, now=0.0, ref=2)
    router.undeliverable(Send("actor", A, Heartbeat()), 1000.0)
    keep_alive(router, 1000.0 + WAIT_S - 1)
    assert outcomes(router.tick(1000.0 + WAIT_S - 1)) == []
    assert status(router, 1000.0 + WAIT_S - 1).waiting["actor"].no_worker_s == WAIT_S - 1
    keep_alive(router, 1000.0 + WAIT_S)
    ended = {line["message_id"] for line in outcomes(router.tick(1000.0 + WAIT_S))}
    assert queued in ended and len(ended) == 2


def test_an_escalated_email_is_not_stuck(router: Router) -> None:
    """An email waiting for a person's decision waits for a person, not a worker: no
    actor connected, it is neither shown as stuck nor ended."""
    join(router, ("reader", R), ("validator", V), ("actor", A))
    message_id = to_actor(router, now=0.0)
    router.handle("actor", A, Done(message_id=message_id, outcome="escalated", reason="needs dana"), 1.0)
    router.undeliverable(Send("actor", A, Heartbeat()), 2.0)
    keep_alive(router, 10 * WAIT_S)
    assert outcomes(router.tick(10 * WAIT_S)) == []
    assert router.flights[message_id].stage == "escalated" and status(router, 10 * WAIT_S).waiting == {}


def test_a_decision_for_an_email_no_actor_takes_is_bounded_too(router: Router) -> None:
    """A decided step handed to the actor stage with no actor connected is stuck like any
    other hand-off, and ends the same way."""
    router.approvers["KEY"] = "dana"
    join(router, ("reader", R), ("validator", V), ("actor", A))
    message_id = to_actor(router, now=0.0)
    router.handle("actor", A, Done(message_id=message_id, outcome="escalated", reason="needs dana"), 1.0)
    router.undeliverable(Send("actor", A, Heartbeat()), 2.0)
    router.handle("intake", CLIENT, Decide(ref=9, message_id=message_id, approve=True, role="support", by="dana"),
                  50.0, key="KEY")
    keep_alive(router, 50.0 + WAIT_S)
    (outcome,) = outcomes(router.tick(50.0 + WAIT_S))
    assert outcome["message_id"] == message_id and outcome["outcome"] == "failed"


def test_a_wait_of_zero_waits_for_ever(settings) -> None:
    """AIRLOCK_NO_WORKER_WAIT_S=0 keeps the old behaviour on purpose: shown, never ended."""
    router = Router(msgspec.structs.replace(settings, no_worker_wait_s=0.0), boot=0xABC)
    keep_alive(router, 0.0)
    to_actor(router, now=0.0)
    keep_alive(router, 1e6)
    assert outcomes(router.tick(1e6)) == []
    assert status(router, 1e6).waiting["actor"] == Waiting(no_worker=1, no_worker_s=1e6)


def test_the_setting_is_read_with_its_default_and_checked() -> None:
    """300 s by default, 0 allowed (for ever), a negative or non-number one names the key."""
    assert settings_module.load({}).no_worker_wait_s == 300.0
    assert settings_module.load({"AIRLOCK_NO_WORKER_WAIT_S": "0"}).no_worker_wait_s == 0.0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(SettingsError, match="AIRLOCK_NO_WORKER_WAIT_S"):
            settings_module.load({"AIRLOCK_NO_WORKER_WAIT_S": bad})


class OldStatus(Message, tag="status", frozen=True):
    """wire.Status as it was before `waiting`: what a client from before decodes with."""

    ref: int
    workers: dict[str, int]
    queued: int
    in_flight: int
    counters: dict[str, int] = {}  # noqa: RUF012  a msgspec Struct field: msgspec copies the default per instance


def test_old_and_new_status_decode_each_other() -> None:
    """A new client reads an old broker's Status (nothing waits), and an old client reads a
    new broker's Status whenever nothing is stuck (`waiting` is then not sent at all)."""
    old = msgspec.msgpack.encode(OldStatus(ref=1, workers={"actor": 1}, queued=0, in_flight=0, counters={"x": 1}))
    decoded = outbound_decoder("intake")(old)
    assert isinstance(decoded, Status) and decoded.waiting == {} and decoded.counters == {"x": 1}
    new = msgspec.msgpack.encode(Status(ref=1, workers={"actor": 1}, queued=0, in_flight=0, waiting={}))
    assert msgspec.msgpack.decode(new, type=OldStatus) == OldStatus(ref=1, workers={"actor": 1}, queued=0,
                                                                    in_flight=0)
    stuck = Status(ref=1, workers={"actor": 0}, queued=0, in_flight=3,
                   waiting={"actor": Waiting(no_worker=3, no_worker_s=12.5, limit_s=300.0)})
    assert outbound_decoder("intake")(msgspec.msgpack.encode(stuck)) == stuck


def test_status_text_names_the_stage_the_count_the_wait_and_the_limit() -> None:
    """`airlock status` prints a line per stuck stage and kind, and nothing while none is."""
    from cli.runtime import waiting_lines

    assert waiting_lines({}) == []
    (no_worker, again) = waiting_lines({"actor": Waiting(no_worker=32, no_worker_s=190.4, limit_s=300.0,
                                                         redelivery=2, redelivery_s=12.0)})
    assert no_worker == ("stuck at the actor stage: 32 waiting with no actor connected or heard from, "
                         "the longest for 190 s; each ends failed once it has waited 300 s (AIRLOCK_NO_WORKER_WAIT_S)")
    assert again.startswith("stuck at the actor stage: 2 waiting to be sent again") and again.endswith("for 12 s")
    (forever,) = waiting_lines({"reader": Waiting(no_worker=1, no_worker_s=5.0)})
    assert "wait for ever (AIRLOCK_NO_WORKER_WAIT_S=0)" in forever
    (escaped,) = waiting_lines({"\x1b[2J": Waiting(no_worker=1)})  # a broker's text is shown escaped
    assert "\x1b" not in escaped


def test_status_json_has_every_field_of_a_stuck_stage() -> None:
    """`--json` gives each stuck stage all five keys, zeros included, and {} when none is."""
    from cli.runtime import status_record

    quiet = status_record(Status(ref=1, workers={"actor": 1}, queued=0, in_flight=0))
    assert quiet["waiting"] == {} and set(quiet) == {"workers", "queued", "in_flight", "counters", "waiting"}
    stuck = status_record(Status(ref=1, workers={"actor": 0}, queued=0, in_flight=1,
                                 waiting={"actor": Waiting(no_worker=1, no_worker_s=2.0, limit_s=300.0)}))
    assert json.loads(json.dumps(stuck))["waiting"] == {"actor": {
        "no_worker": 1, "no_worker_s": 2.0, "limit_s": 300.0, "redelivery": 0, "redelivery_s": 0.0}}
