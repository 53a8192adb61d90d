"""broker.carry alone (no sockets, no disk): a turn's effects leave in the order that keeps
"accepted" meaning "on disk", and a failed sync turns each Accepted into Refused disk_full."""

from __future__ import annotations

import errno
import json
from typing import cast

import msgspec
import pytest
import zmq

from airlock.trace import TraceWriter
from airlock.wire import FRAME_OVERHEAD_BYTES, Accepted, Hello, Read, Refused, Submit, outbound_decoder
from broker import endpoints, journal
from broker.carry import CarryOut, trace_chunks, unkept
from broker.journal import QueuedEmail, WriteFailed
from broker.outbox import Send
from broker.router import Router
from broker.storage import Storage


class Socket:
    def __init__(self, log: list, role: str, gone: bool = False) -> None:
        self.log, self.role, self.gone = log, role, gone

    def send(self, data: bytes, flags: int = 0) -> None:
        if self.gone:
            raise zmq.ZMQError(zmq.EHOSTUNREACH)
        if not flags & zmq.SNDMORE:
            self.log.append((self.role, data))


class Endpoints:
    def __init__(self, log: list, gone: tuple[str, ...] = (), watched: bool = True) -> None:
        self.sockets = {role: Socket(log, role, role in gone) for role in ("intake", "reader")}
        self.publisher = Socket(log, "published")
        self.watched = watched


class Journal:
    def __init__(self, log: list, fail: bool = False) -> None:
        self.log, self.fail = log, fail
        self.held: list[str] = []

    def append(self, entry: QueuedEmail) -> None:
        self.held.append(entry.message_id)

    def sync(self) -> WriteFailed | None:
        self.log.append(("fsync", self.held))
        held, self.held = tuple(self.held), []
        return WriteFailed(OSError(errno.ENOSPC, "No space left on device"), held) if self.fail and held else None


class Writer:
    def __init__(self, log: list) -> None:
        self.log = log

    def write(self, chunk: bytes) -> None:
        self.log.append(("trace", chunk))


def turn(settings, fail: bool = False, gone: tuple[str, ...] = (), watched: bool = True) -> tuple[list, Router]:
    log: list = []
    router = Router(settings, boot=0xABC)
    router.handle("reader", b"r1", Hello(credit=1), 0.0)
    effects = router.handle("intake", b"c", Submit(ref=1, raw=b"Order 4411", format="text"), 0.0)
    # The doubles are duck-typed: a turn uses only the endpoints' sockets, publisher and
    # watched, the journal's append and sync and the writer's write (recorded in `log`).
    carry = CarryOut(settings, router, cast(endpoints.Endpoints, Endpoints(log, gone, watched)),
                     cast(journal.Journal, Journal(log, fail)), cast(TraceWriter, Writer(log)),
                     Storage(router.counters))
    carry(effects)
    return log, router


def test_work_leaves_before_the_fsync_and_the_accepted_after_it(settings) -> None:
    log, _ = turn(settings)
    assert [entry[0] for entry in log] == ["reader", "fsync", "intake", "trace", "published"]
    (_, held), (_, reply) = log[1], log[2]
    assert held == ["abc-1"] and outbound_decoder("intake").frame(reply) == [Accepted(ref=1, message_id="abc-1")]


def test_with_no_subscriber_nothing_is_published_and_the_file_still_gets_every_line(settings) -> None:
    """The broker makes lines public only while someone subscribes (broker.endpoints: XPUB)."""
    log, _ = turn(settings, watched=False)
    assert [entry[0] for entry in log] == ["reader", "fsync", "intake", "trace"]
    assert log[-1][1].count(b"\n") == len(turn(settings)[0][-2][1].splitlines())


def test_a_failed_fsync_refuses_the_email_and_ends_it_failed(settings, capsys) -> None:
    log, router = turn(settings, fail=True)
    (reply,) = [data for role, data in log if role == "intake"]
    (refused,) = outbound_decoder("intake").frame(reply)
    assert isinstance(refused, Refused) and refused.code == "disk_full"
    lines = [json.loads(line) for role, chunk in log if role == "trace" for line in chunk.splitlines()]
    ends = [(line["event"], line.get("outcome")) for line in lines][-2:]
    assert ends == [("storage_failed", None), ("outcome", "failed")]
    assert router.flights == {} and router.disk_full.startswith("cannot write the journal")
    assert "cannot write the journal" in capsys.readouterr().err


def test_a_worker_gone_from_its_socket_is_buried_in_the_same_turn(settings) -> None:
    """What the socket refused comes back as the Router's effects, after this turn's lines;
    the email it refused never reached a worker, so it is sent again, not failed, even at
    max_attempts 1."""
    log, router = turn(msgspec.structs.replace(settings, max_attempts=1), gone=("reader",))
    lines = [json.loads(line)["event"] for role, chunk in log if role == "trace" for line in chunk.splitlines()]
    assert lines[-2:] == ["worker_lost", "redelivery"] and b"r1" not in router.workers["reader"]
    assert [flight.attempts for flight in router.flights.values()] == [0]


@pytest.mark.parametrize("message", [Accepted(ref=1, message_id="other"),
                                     Read(message_id="m", raw=b"", format="text")])
def test_only_an_accepted_for_an_unkept_email_is_swapped(message) -> None:
    send = Send("intake", b"c", message)
    assert unkept(send, {"m-1"}, "full") is send
    swapped = unkept(Send("intake", b"c", Accepted(ref=3, message_id="m-1")), {"m-1"}, "full").message
    assert isinstance(swapped, Refused) and swapped.ref == 3 and swapped.code == "disk_full"


def test_published_trace_chunks_keep_whole_lines_under_the_cap() -> None:
    """The broker publishes a turn's trace lines in chunks: whole lines, in order, each chunk
    within the subscriber's frame cap (a single longer line goes alone)."""
    lines = [f'{{"n":{n},"pad":"{"x" * (n % 7) * 40}"}}\n'.encode() for n in range(500)]
    cap = 2_000 + FRAME_OVERHEAD_BYTES
    chunks = trace_chunks(lines, cap)
    assert b"".join(chunks) == b"".join(lines) and all(c.endswith(b"\n") for c in chunks)
    assert len(chunks) > 5 and all(len(c) <= cap - FRAME_OVERHEAD_BYTES for c in chunks)
    assert trace_chunks([b"y" * 5_000 + b"\n", b"z\n"], cap) == [b"y" * 5_000 + b"\n", b"z\n"]


def test_a_greeting_the_socket_refuses_leaves_the_worker_lost_to_the_turns_effects(settings) -> None:
    """send_now sends a new connection's greeting at once and writes nothing: the worker_lost
    it led to comes back, to be carried out after the turn's own lines (its worker_joined)."""
    log: list = []
    router = Router(settings, boot=0xABC)
    joined = router.handle_frame("reader", b"r1", [Hello(credit=1)], 0.0, serve=False)
    carry = CarryOut(settings, router, cast(endpoints.Endpoints, Endpoints(log, gone=("reader",))),
                     cast(journal.Journal, Journal(log)), cast(TraceWriter, Writer(log)), Storage(router.counters))
    later = carry.send_now(router.greetings())
    assert log == [] and b"r1" not in router.workers["reader"]
    events = [json.loads(line)["event"] for line in [*joined, *later] if isinstance(line, bytes)]
    assert events == ["worker_joined", "worker_lost"]
