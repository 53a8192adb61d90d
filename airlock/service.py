"""The loop every worker runs: receive a frame, decode it for this role, handle it, reply.

The loop is all the I/O a worker does with the broker; `handle` is the service's pure logic.
Frames that do not decode are reported as trace events, never raised.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable

import zmq

from airlock.transport import Channel
from airlock.wire import Event, Hello, Malformed, Message, RoleDecoder, Violation

IDLE_HELLO_S = 1.0  # an idle worker re-announces itself, so a restarted broker finds it


def serve(channel: Channel, decode: RoleDecoder, handle: Callable[[Message], Iterable[Message]],
          credit: int, stop: threading.Event) -> None:
    channel.send(Hello(credit=credit))
    while not stop.is_set():
        frame = channel.recv(IDLE_HELLO_S)
        if frame is None:
            channel.send(Hello(credit=credit))
            continue
        match decode(frame):
            case Malformed(reason=reason, size=size):
                channel.send(Event(event="malformed_frame", detail={"reason": reason, "bytes": size}))
            case Violation(kind=kind, reason=reason):
                channel.send(Event(event="violation", detail={"kind": kind, "reason": reason}))
            case message:
                for output in handle(message):
                    channel.send(output)


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
    from airlock.errors import ConfigError

    try:
        settings = settings_module.load(env)
        task = task_module.load(settings.task) if needs_task else None
        serve_fn(settings, task, stop_on_signals())
    except ConfigError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 78
    except zmq.ZMQError as exc:
        print(f"{name}: network: {exc}", file=sys.stderr)
        return 1
    except PermissionError as exc:  # typically a data folder the service's user cannot write
        print(f"{name}: {exc.strerror}: {exc.filename} (is the data folder writable by uid {os.getuid()}?)",
              file=sys.stderr)
        return 78
    return 0
