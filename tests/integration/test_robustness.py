"""Garbage on every endpoint, services dying mid-stream, and clean shutdown."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import msgspec
import zmq

from airlock.wire import Done, Passed, Reading, encode
from tests.conftest import ROOT
from tests.integration.conftest import wait_until

SEED = str(ROOT / "samples" / "seed_4411_de.eml")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def blast(sock: zmq.Socket, frames: list[list[bytes]]) -> None:
    """Send from an authenticated peer gone rogue: its frames reach the broker's decoder."""
    for parts in frames:
        sock.send_multipart(parts)
    sock.close(linger=2000)


GARBAGE = [[b""], [b"\xc1"], [os.urandom(64)], [b"\x91" * 50_000 + b"\xc0"], [b"a", b"b", b"c"],
           [msgspec.msgpack.encode({"kind": "passed", "message_id": "x", "value": [1, 2]})]]


def test_garbage_and_wrong_role_messages_are_recorded_and_harmless(stack) -> None:
    """Every endpoint refuses garbage and foreign messages, records each, and keeps working."""
    s = stack().start()
    pids = {name: s.pid(name) for name in ("broker", "reader-1", "validator", "actor")}
    forged = {
        "intake": [encode(Passed(message_id="x", value="1"))],
        "reader": [encode(Passed(message_id="x", value="666666"))],
        "validator": [encode(Done(message_id="x", outcome="completed"))],
        "actor": [encode(Reading(message_id="x", answer="1", source="model"))],
    }
    for role in ("intake", "reader", "validator", "actor"):
        blast(s.socket(role), [*GARBAGE, forged[role]])
    expected = len(GARBAGE) * 4
    assert wait_until(lambda: len(s.trace(event="malformed_frame")) >= expected), s.trace(event="malformed_frame")
    violations = s.trace(event="violation")
    assert {(v["endpoint"], v["kind"]) for v in violations} == {
        ("intake", "passed"), ("reader", "passed"), ("validator", "done"), ("actor", "reading")}
    assert all(alive(pid) for pid in pids.values())
    (result,) = s.inject(SEED)
    assert result["outcome"] == "completed"
    assert {c["args"]["order_id"] for c in s.calls()} == {"4411"}  # the forged 666666 never ran


def test_reader_killed_mid_stream_every_email_still_ends(stack, fake_model) -> None:
    """kill -9 a busy reader: it is restarted, the trace says so, every email gets one outcome."""
    model = fake_model("4411")
    model.delay_s = 0.3
    s = stack(AIRLOCK_READ_DEADLINE_S="3").start("--model-url", model.url, "--readers", "2")
    submitted = s.airlock("inject", "--json", *[SEED] * 12)
    ids = [line.split('"id":"')[1].split('"')[0] for line in submitted.stdout.splitlines()]
    assert len(ids) == 12
    assert wait_until(lambda: len(model.requests) >= 2)
    os.kill(s.pid("reader-1"), signal.SIGKILL)
    assert wait_until(lambda: len(s.trace(event="outcome")) >= 12, timeout_s=60)
    time.sleep(0.5)
    outcomes = s.trace(event="outcome")
    assert sorted(o["message_id"] for o in outcomes) == sorted(ids)
    assert {o["outcome"] for o in outcomes} <= {"completed", "failed"}
    restarts = s.trace(event="service_restarted")
    assert restarts and restarts[0]["service"] == "reader-1"
    steps = [(c["message_id"], c["step"]) for c in s.calls()]
    assert len(steps) == len(set(steps))


def test_sigterm_stops_every_child(stack) -> None:
    """SIGTERM to `airlock up` stops all services and removes their pid files."""
    s = stack().start()
    pids = [s.pid(name) for name in ("broker", "reader-1", "validator", "actor")]
    assert s.stop() == 0
    assert not any(alive(pid) for pid in pids)
    assert not list((s.data / "run").glob("*.pid"))
    assert s.trace(event="stopped")


def test_actor_refuses_a_plan_outside_its_catalog(stack, tmp_path: Path) -> None:
    """A plan naming a tool the catalog lacks: the actor refuses, and `up` stops and says why."""
    task = tmp_path / "bad.toml"
    task.write_text((ROOT / "tasks" / "order_status.toml").read_text()
                    .replace("mail/send_status", "mail/send_everything")
                    .replace("../samples", str(ROOT / "samples")))
    s = stack(task=str(task))
    done = s.airlock("up", timeout=60)
    assert done.returncode == 78
    assert "mail/send_everything" in done.stderr and "no such tool" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_broker_killed_mid_stream_resumes_from_its_journal(stack, fake_model) -> None:
    """kill -9 the broker with emails in flight: the restarted broker re-dispatches them from
    its journal and each ends with exactly one outcome, completed, with no call made twice."""
    model = fake_model("4411")
    model.delay_s = 0.5
    s = stack().start("--model-url", model.url)
    submitted = s.airlock("inject", "--json", *[SEED] * 6)
    ids = [line.split('"id":"')[1].split('"')[0] for line in submitted.stdout.splitlines()]
    assert wait_until(lambda: len(model.requests) >= 1)
    old = s.pid("broker")
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: s.pid("broker") != old and len(s.trace(event="outcome")) >= len(ids), timeout_s=60)
    outcomes = [o for o in s.trace(event="outcome") if o["message_id"] in ids]
    assert sorted(o["message_id"] for o in outcomes) == sorted(ids)
    assert {o["outcome"] for o in outcomes} == {"completed"}
    assert s.trace(event="recovered")
    steps = [(c["message_id"], c["step"]) for c in s.calls()]
    assert len(steps) == len(set(steps)) == 2 * len(ids)
