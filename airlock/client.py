"""A client of the broker's intake endpoint: submit emails, await outcomes, ask status.

Every call has a deadline; silence from the broker becomes BrokerUnreachable with the
endpoint in the message, never a hang. A client that must authenticate and has no keys
says so before it waits for anything (KeysMissing), and one whose key the broker refuses
says that (KeyRefused), not that the broker is silent.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import zmq

from airlock.errors import BrokerUnreachable, KeyRefused, KeysMissing
from airlock.settings import Settings, holds
from airlock.senders import SenderProof
from airlock.transport import ZmqChannel, client_keys
from airlock.wire import (
    Accepted, Await, Decide, EmailFormat, Message, Notice, Ping, Refused, Result, Status, Submit, outbound_decoder,
)

KEYS_HINT = ("pass the --data-dir of `airlock up` (or run beside the compose lab's ./airlock-keys), "
             "or set AIRLOCK_KEYS")
WINDOW = 500  # submissions in flight before waiting for acknowledgements
BUSY_RETRY_S = 0.2


@dataclass(frozen=True)
class Submission:
    raw: bytes
    format: EmailFormat
    origin: str
    sender: str = ""  # the From address as read; see wire.Submit
    sender_proof: SenderProof = "none"  # only the SMTP intake sets a proof (airlock/senders.py)


def _require_keys(settings: Settings, role: str) -> Path:
    """The keys folder holding this role's secret key, or KeysMissing naming where it looked.

    `airlock up` always authenticates, so a CLI client without keys can only fail; it says
    so now instead of waiting for a broker that will never answer it."""
    folder = settings.keys_folder
    if folder is not None and holds(folder, f"{role}.key_secret"):
        return folder
    if settings.keys is not None:
        raise KeysMissing(f"no CURVE key {role}.key_secret in {settings.keys} (AIRLOCK_KEYS): {KEYS_HINT}")
    looked = " or ".join(str(path.resolve()) for path in settings.key_folders_looked_in)
    raise KeysMissing(f"no CURVE keys in {looked}: {KEYS_HINT}")


class IntakeClient:
    def __init__(self, settings: Settings, timeout_s: float = 5.0, role: str = "intake",
                 require_keys: bool = False) -> None:
        self.endpoint = settings.endpoint("intake")
        self.timeout_s = timeout_s
        self._ctx = zmq.Context.instance()
        self._keys = _require_keys(settings, role) if require_keys else settings.keys_folder
        client, server_key = client_keys(settings, role)  # the dashboard injects with its own key
        self._channel = ZmqChannel(self._ctx, self.endpoint, settings.max_frame_bytes, client, server_key,
                                   watch_handshake=True)
        self._decode = outbound_decoder("intake")
        self._inbox: collections.deque[object] = collections.deque()
        self._ref = 0

    def __enter__(self) -> IntakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def submit(self, items: Iterable[Submission]) -> Iterator[tuple[str, str]]:
        """Submit emails; yield (origin, message_id) as each is accepted."""
        queue = list(items)
        waiting: dict[int, Submission] = {}
        position = 0
        while position < len(queue) or waiting:
            room = min(WINDOW - len(waiting), len(queue) - position)
            if room > 0:  # a batch: the broker accepts them in one turn, with one fsync
                self._send(queue[position:position + room], waiting)
                position += room
            match self._next():
                case Accepted(ref=ref, message_id=message_id) if ref in waiting:
                    yield waiting.pop(ref).origin, message_id
                case Refused(ref=ref) if ref in waiting:
                    # Back-pressure: the broker's queue is full. Wait, then send it again.
                    time.sleep(BUSY_RETRY_S)
                    self._send([waiting.pop(ref)], waiting)

    def submit_one(self, item: Submission) -> str:
        """Submit one email and return its message id, or raise BrokerUnreachable (a socket
        error included): what the SMTP intake and the dashboard hand over, one at a time."""
        try:
            for _, message_id in self.submit([item]):
                return message_id
        except zmq.ZMQError as exc:
            raise BrokerUnreachable(f"the broker at {self.endpoint} failed: {exc}") from exc
        raise BrokerUnreachable(f"the broker at {self.endpoint} accepted nothing")  # submit yields or raises

    def _send(self, items: list[Submission], waiting: dict[int, Submission]) -> None:
        submits: list[Message] = []
        for item in items:
            self._ref += 1
            waiting[self._ref] = item
            submits.append(Submit(ref=self._ref, raw=item.raw, format=item.format, origin=item.origin,
                                  sender=item.sender, sender_proof=item.sender_proof))
        self._channel.send_all(submits)

    def decide(self, message_id: str, approve: bool, role: str, by: str) -> str:
        """Send a person's decision on an escalated email; '' if taken, else the broker's reason."""
        self._ref += 1
        ref = self._ref
        self._channel.send(Decide(ref=ref, message_id=message_id, approve=approve, role=role, by=by))
        while True:
            match self._next():
                case Accepted(ref=got) if got == ref:
                    return ""
                case Refused(ref=got, reason=reason) if got == ref:
                    return reason

    def outcomes(self, ids: list[str], timeout_s: float) -> Iterator[Result]:
        """Yield each id's Result as it arrives; stop at the deadline (stragglers are not yielded)."""
        missing = set(ids)
        self._ref += 1
        for start in range(0, len(ids), 1000):
            self._channel.send(Await(ref=self._ref, ids=ids[start:start + 1000]))
        deadline = time.monotonic() + timeout_s
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            match self._next(left, raise_on_silence=False):
                case Result(message_id=message_id) as result if message_id in missing:
                    missing.discard(message_id)
                    yield result
                case Refused(message_id=message_id) if message_id in missing:
                    missing.discard(message_id)  # unknown to the broker: no outcome will come

    def arrived(self, ids: list[str]) -> list[Result]:
        """The Results for `ids` that have already arrived and not been read, without
        waiting for more: what a client interrupted while waiting can still report."""
        wanted, found = set(ids), []
        while (message := self._next(0, raise_on_silence=False)) is not None:
            if isinstance(message, Result) and message.message_id in wanted:
                found.append(message)
        return found

    def status(self) -> Status:
        self._ref += 1
        ref = self._ref
        self._channel.send(Ping(ref=ref))
        while True:
            match self._next():
                case Status(ref=got) as status if got == ref:
                    return status

    def notice(self, event: str, **detail: object) -> None:
        self._channel.send(Notice(event=event, detail=detail))  # type: ignore[arg-type]

    def _next(self, timeout_s: float | None = None, raise_on_silence: bool = True) -> object:
        """The next message from the broker (a frame may carry several), or None."""
        if not self._inbox:
            try:
                frame = self._channel.recv(self.timeout_s if timeout_s is None else timeout_s)
            except KeyRefused as exc:
                raise KeyRefused(f"the broker at {self.endpoint} refused this key ({exc}; keys from "
                                 f"{self._keys.resolve() if self._keys else 'nowhere'}): {KEYS_HINT}") from None
            if frame is None:
                if raise_on_silence:
                    raise BrokerUnreachable(f"the broker at {self.endpoint} did not answer within "
                                            f"{self.timeout_s} s; is `airlock up` running?")
                return None
            self._inbox.extend(self._decode.frame(frame))
        message = self._inbox.popleft()
        return message if isinstance(message, Message) else None  # Malformed: not from a broker
