"""The loop every worker runs: receive a frame, decode it for this role, handle it, reply.

The loop is all the I/O a worker does with the broker; `handle` is the service's pure logic.
Frames that do not decode are reported as trace events, never raised. Liveness both ways:
the worker says Hello every heartbeat interval (to a broker that knows it, a heartbeat; to
a restarted one, a registration), and if it hears nothing from the broker for `liveness`
intervals it drops its socket and connects again, waiting twice as long each time up to a
cap (zguide's Paranoid Pirate). Each Hello names the worker process and numbers its
connection (wire.Hello), so a broker that was too busy to answer for a while keeps one
worker for all its reconnects: the newest connection.
"""

from __future__ import annotations

import collections
import faulthandler
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import zmq

from airlock.settings import Settings
from airlock.transport import Channel, connector
from airlock.wire import Event, Heartbeat, Hello, Malformed, Message, RoleDecoder, Violation, outbound_decoder


@dataclass(frozen=True)
class Liveness:
    interval_s: float = 1.0
    liveness: int = 3
    backoff_max_s: float = 8.0

    @classmethod
    def of(cls, settings: Settings) -> Liveness:
        return cls(settings.heartbeat_interval_s, settings.heartbeat_liveness, settings.reconnect_backoff_max_s)


BATCH_S = 0.02  # replies wait at most this long for the rest of their batch


def serve(connect: Callable[[], Channel], decode: RoleDecoder,
          handle: Callable[[Message], Iterable[Message]], credit: int, stop: threading.Event,
          timing: Liveness = Liveness(), before_replies: Callable[[], None] = lambda: None) -> None:
    """`before_replies` runs once per batch, before any reply of the batch is sent: the
    actor syncs its call log there (group commit), so a step is on disk before it is
    acknowledged, at one fsync per batch instead of one per call."""
    backoff = timing.interval_s
    # One name for this worker across its reconnects, each connection numbered: the broker
    # keeps the newest connection of a name and drops the older ones (wire.Hello).
    name, connection = secrets.token_hex(16), 0
    while not stop.is_set():
        channel = connect()
        connection += 1
        hello = Hello(credit=credit, worker=name, connection=connection)
        try:
            heard = _session(channel, decode, handle, hello, stop, timing, before_replies)
        finally:
            channel.close()
        if stop.is_set():
            return
        backoff = timing.interval_s if heard else min(backoff * 2, timing.backoff_max_s)
        stop.wait(backoff)


def serve_role(settings: Settings, role: str, handle: Callable[[Message], Iterable[Message]], credit: int,
               stop: threading.Event, channel: Channel | None = None,
               before_replies: Callable[[], None] = lambda: None) -> None:
    """serve() for the worker of `role` as the settings describe it: its endpoint, its keys,
    the broker's decoder for it and the heartbeat timing. A test may pass its own channel."""
    serve(connector(settings, role, channel), outbound_decoder(role), handle, credit, stop,
          Liveness.of(settings), before_replies)


def _session(channel: Channel, decode: RoleDecoder, handle: Callable[[Message], Iterable[Message]],
             hello: Hello, stop: threading.Event, timing: Liveness, before_replies: Callable[[], None]) -> bool:
    """One connection's life; returns whether the broker was heard at all."""
    channel.send(hello)
    batch = max(1, hello.credit // 4)
    last_heard = last_said = time.monotonic()
    heard = False
    inbox: collections.deque[Message | Malformed | Violation] = collections.deque()
    while not stop.is_set():
        frame = channel.recv(0 if inbox else timing.interval_s / 2)
        now = time.monotonic()
        if frame is not None:
            last_heard, heard = now, True
            inbox.extend(decode.frame(frame))
        if inbox:
            replies: list[Message] = []
            handled = 0
            # Replies go out every quarter of the credit or BATCH_S, whichever comes first: a
            # quick handler answers in batches, a slow one (a model call) answers each as it is
            # done, and the broker gets credit back (and sends more) while three quarters of
            # the work is still queued here, so this worker never waits for it.
            while inbox and handled < batch and time.monotonic() - now <= BATCH_S:
                replies += _one(inbox.popleft(), handle)
                handled += 1
                if not inbox and (frame := channel.recv(0)) is not None:
                    inbox.extend(decode.frame(frame))
            if replies:
                before_replies()
                channel.send_all(replies)
            now = last_heard = time.monotonic()  # silence counts while waiting, not while busy
        if now - last_said >= timing.interval_s:
            channel.send(hello)
            last_said = now
        if now - last_heard > timing.interval_s * timing.liveness:
            return heard  # the broker went quiet: a fresh socket, after a backoff
    return heard


def _one(decoded: Message | Malformed | Violation, handle: Callable[[Message], Iterable[Message]]) -> list[Message]:
    match decoded:
        case Malformed(reason=reason, size=size):
            return [Event(event="malformed_frame", detail={"reason": reason, "bytes": size})]
        case Violation(kind=kind, reason=reason):
            return [Event(event="violation", detail={"kind": kind, "reason": reason})]
        case Heartbeat():
            return []
        case message:
            return list(handle(message))


def stop_on_signals() -> threading.Event:
    """An Event set by SIGTERM or SIGINT, so a service finishes its turn and exits cleanly."""
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    return stop


def main(name: str, serve_fn: Callable[..., None], *, needs_task: bool = True,
         env: dict[str, str] | None = None) -> int:
    """The body of every `python -m <service>`: settings, task, then serve until stopped.

    Configuration errors exit with 78 (EX_CONFIG), which the supervisor does not retry:
    restarting cannot fix a bad task file. Everything else is one line on stderr too.
    """
    from airlock import settings as settings_module, task as task_module
    from airlock.errors import EX_CONFIG, ConfigError, LockHeld

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: where is it stuck?

    try:
        settings = settings_module.load(env)
        task = task_module.load(settings.task) if needs_task else None
        serve_fn(settings, task, stop_on_signals())
    except (ConfigError, LockHeld) as exc:  # a data dir another process holds: no restart frees it
        print(f"{name}: {exc}", file=sys.stderr)
        return EX_CONFIG
    except zmq.ZMQError as exc:
        print(f"{name}: network: {exc}", file=sys.stderr)
        return 1
    except PermissionError as exc:  # typically a data folder the service's user cannot write
        print(f"{name}: {exc.strerror}: {exc.filename} (is the data folder writable by uid {os.getuid()}?)",
              file=sys.stderr)
        return EX_CONFIG
    return 0
