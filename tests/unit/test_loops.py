"""Each worker's real serve loop, driven over the in-memory channel: no network at all."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from airlock import task as task_module
from airlock.transport import MemoryChannel
from airlock.wire import Done, Event, Hello, Passed, Read, Reading, Rejected, inbound_decoder

ROOT = Path(__file__).resolve().parents[2]
TASK = task_module.load(ROOT / "tasks" / "order_status.toml")
SEED = (ROOT / "samples" / "seed_4411_de.eml").read_bytes()


@pytest.fixture
def run_worker(settings):
    """Start a service's serve() in a thread on one end of a MemoryChannel; stop it after."""
    started: list[tuple[threading.Thread, threading.Event]] = []

    def run(serve, role: str) -> tuple[MemoryChannel, object]:
        broker_end, worker_end = MemoryChannel.pair()
        stop = threading.Event()
        thread = threading.Thread(target=serve, args=(settings, TASK, stop, worker_end), daemon=True)
        thread.start()
        started.append((thread, stop))
        decode = inbound_decoder(role)
        arrived: list[object] = []

        def receive():
            """The next message; a worker may send several in one frame (a batch)."""
            if not arrived:
                frame = broker_end.recv(5.0)
                assert frame is not None, "the worker did not answer"
                arrived.extend(decode.frame(frame))
            return arrived.pop(0)

        return broker_end, receive

    yield run
    for thread, stop in started:
        stop.set()
        thread.join(5)


def test_reader_loop(run_worker) -> None:
    """The reader greets with its credit (no model: a batch, see settings), then answers an
    Read with a Reading."""
    from reader.app import serve

    channel, receive = run_worker(serve, "reader")
    hello = receive()
    assert isinstance(hello, Hello) and (hello.credit, hello.connection) == (64, 1) and hello.worker
    channel.send(Read(message_id="m", raw=SEED, format="eml"))
    reading = receive()
    assert isinstance(reading, Reading) and (reading.answer, reading.source) == ("4411", "recorded")


def test_validator_loop(run_worker) -> None:
    """The validator answers each Reading with Passed or Rejected."""
    from validator.app import serve

    channel, receive = run_worker(serve, "validator")
    assert isinstance(receive(), Hello)
    channel.send(Reading(message_id="a", answer="4411", source="model", grounded=True))  # the reader found it
    channel.send(Reading(message_id="b", answer="4411 bitte", source="model"))
    assert receive() == Passed(message_id="a", value="4411")
    assert isinstance(receive(), Rejected)


def test_actor_loop_and_garbage(run_worker, settings) -> None:
    """The actor runs the plan for Passed, and reports garbage and wrong kinds as events."""
    from actor.app import serve

    channel, receive = run_worker(serve, "actor")
    assert isinstance(receive(), Hello)
    channel.send_frame(b"\xc1 garbage")
    assert receive().event == "malformed_frame"
    channel.send(Read(message_id="x", raw=b"do it", format="text"))  # a Read never goes to the actor
    violation = receive()
    assert isinstance(violation, Event) and violation.event == "violation"
    channel.send(Passed(message_id="m", value="4411"))
    done = receive()
    assert isinstance(done, Done) and done.outcome == "completed" and len(done.calls) == 2
    events = [json.loads(line)["event"] for line in settings.calls_path.read_text().splitlines()]
    assert events == ["intent", "call", "intent", "call"]  # each call claimed before it ran
