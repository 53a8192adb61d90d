"""A worker that reconnects while the broker is busy starting is one worker, not one per connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from airlock import records, settings as settings_module, trace
from airlock.service import serve_role
from airlock.wire import Accepted, Message, Ping, Read, Status, Unreadable, encode, outbound_decoder
from tests.conftest import airlock_env
from tests.integration.test_disk_full import Intake

STALL_S = 3.0  # the broker's start takes this long: a worker reconnects several times meanwhile


def _unreadable(message: Message) -> Iterable[Message]:
    """A reader that ends every email at once (`rejected`), so each email's path is short."""
    if isinstance(message, Read):
        yield Unreadable(message_id=message.message_id, rule="test.unreadable", reason="not read in this test")


def test_a_worker_reconnecting_through_a_slow_start_gets_its_work_on_its_live_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader reconnects every 0.7 s while recovery takes 3 s, and emails wait meanwhile:
    once up, the broker counts one reader, and every email reaches it with no redelivery
    (nothing is sent to a connection that is gone)."""
    from broker import app

    slow_recover = app.recover

    def recover(*args, **kwargs):  # a long trace to read back
        time.sleep(STALL_S)
        return slow_recover(*args, **kwargs)

    monkeypatch.setattr(app, "recover", recover)
    env = {**airlock_env(tmp_path / "data"), "AIRLOCK_INSECURE": "1", "AIRLOCK_HEARTBEAT_INTERVAL_S": "0.2",
           "AIRLOCK_RECONNECT_BACKOFF_MAX_S": "0.1"}
    settings = settings_module.load(env)
    stop, worker_stop = threading.Event(), threading.Event()
    broker = threading.Thread(target=app.serve, args=(settings, None, stop), daemon=True)
    reader = threading.Thread(target=serve_role, args=(settings, "reader", _unreadable, 4, worker_stop),
                              daemon=True)
    broker.start()
    reader.start()
    intake = Intake(str(settings.ports["intake"]))
    try:
        replies = intake.submit(6)  # waits in the intake socket until the broker is up
        accepted = [reply.message_id for reply in replies if isinstance(reply, Accepted)]
        assert len(accepted) == 6, replies
        found = trace.settled(settings.trace_path, accepted, finished=6, timeout_s=20)
        intake.sock.send(encode(Ping(ref=99)))
        assert intake.sock.poll(10_000)
        (status,) = outbound_decoder("intake").frame(intake.sock.recv())
    finally:
        intake.close()
        stop.set()  # the broker first: a reader stopped first would be a worker lost
        broker.join(20)
        worker_stop.set()
        reader.join(10)
    every = list(trace.read(settings.trace_path))
    joined = [r for r in every if isinstance(r, records.WorkerJoined)]
    redelivered = [r for r in every if isinstance(r, records.Redelivery)]
    outcomes = {r.message_id: r.outcome for r in every if isinstance(r, records.OutcomeLine)}
    assert all(any(isinstance(r, records.OutcomeLine) for r in lines) for lines in found.values())
    assert redelivered == [], [(r.message_id, r.reason) for r in redelivered]
    assert {outcomes[i] for i in accepted} == {"rejected"}
    lost = [r for r in every if isinstance(r, records.WorkerLost)]
    assert isinstance(status, Status) and status.workers["reader"] == 1, status
    # One join; two when the connection the broker met first was closed just before it was
    # up (then it is buried holding nothing, greeted before any work went to it).
    assert len(joined) <= 2 and len(joined) - len(lost) == 1, (joined, lost)
    assert all(line.held == 0 for line in lost), lost
