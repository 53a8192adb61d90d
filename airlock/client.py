"""A client of the broker's intake endpoint: submit emails, await outcomes, ask status.

Every call has a deadline; silence from the broker becomes BrokerUnreachable with the
endpoint in the message, never a hang. A client that must authenticate and has no keys
says so before it waits for anything (KeysMissing), and one whose key the broker refuses
says that (KeyRefused), not that the broker is silent.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path

import zmq

from airlock.errors import AirlockError, BrokerUnreachable, DiskFull, KeyRefused, KeysMissing, QueueFull, RequestRefused
from airlock.settings import Settings, holds
from airlock.transport import ZmqChannel, client_keys
from airlock.wire import (
    Accepted,
    Await,
    Decide,
    Email,
    Message,
    Note,
    Notice,
    Ping,
    Refused,
    Result,
    Status,
    Submit,
    outbound_decoder,
)

KEYS_HINT = ("pass the --data-dir of `airlock up` (or run beside the compose lab's ./airlock-keys), "
             "or set AIRLOCK_KEYS")
WINDOW = 500  # emails in flight before waiting for acknowledgements
BUSY_RETRY_S = 0.2  # the first wait after "queue full"; it doubles up to BUSY_RETRY_MAX_S
BUSY_RETRY_MAX_S = 2.0
AWAIT_CHUNK = 1000  # ids per Await, within AIRLOCK_AWAIT_MAX_IDS


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
                 require_keys: bool = False, busy_wait_s: float | None = None) -> None:
        self.endpoint = settings.endpoint("intake")
        self.timeout_s = timeout_s
        # How long a full queue may accept nothing before QueueFull (AIRLOCK_QUEUE_FULL_WAIT_S).
        self.busy_wait_s = settings.queue_full_wait_s if busy_wait_s is None else busy_wait_s
        self._await_max_ids, self._await_max_waiters = settings.await_max_ids, settings.await_max_waiters
        self._ctx: zmq.Context = zmq.Context.instance()
        self._keys = _require_keys(settings, role) if require_keys else settings.keys_folder
        client, server_key = client_keys(settings, role)  # the dashboard injects with its own key
        self._channel = ZmqChannel(self._ctx, self.endpoint, settings.max_frame_bytes, client, server_key,
                                   watch_handshake=True)
        self._decode = outbound_decoder("intake")
        self._inbox: collections.deque[object] = collections.deque()
        self._ref = 0
        self.unanswered: list[Email] = []  # sent by the last submit, never answered (see submit_each)

    def __enter__(self) -> IntakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def submit(self, items: Iterable[Email], busy_wait_s: float | None = None) -> Iterator[tuple[str, str]]:
        """Submit emails; yield (origin, message_id) as each is accepted (see submit_each)."""
        for item, message_id in self.submit_each(items, busy_wait_s):
            yield item.origin, message_id

    def submit_each(self, items: Iterable[Email],
                    busy_wait_s: float | None = None) -> Generator[tuple[Email, str], None, None]:
        """Submit emails; yield (email, message_id) as each is accepted.

        Back-pressure: what the broker refuses with "queue full" is sent again, together,
        after a wait doubling from BUSY_RETRY_S to BUSY_RETRY_MAX_S, and nothing new is sent
        meanwhile. Once nothing has been accepted for busy_wait_s (default: the client's),
        QueueFull (with the broker's reason) ends the call. A refusal that retrying cannot
        cure (DiskFull for "disk_full", RequestRefused for any other) stops new sends; the
        answers to what was already sent are still read, so each is known accepted or not,
        then the error ends the call.

        Whatever ends the call, what was accepted before it has been yielded, and
        `self.unanswered` holds what was sent and never answered: the broker may have taken
        those (a paused broker reads them when it resumes). If the CURVE handshake never
        succeeded nothing reached the broker, and closing drops it (ZmqChannel.close). Every other email not
        yielded was certainly not accepted, so a caller can say exactly what went in."""
        queue = list(items)
        patience_s = self.busy_wait_s if busy_wait_s is None else busy_wait_s
        waiting: dict[int, Email] = {}
        refused: list[Email] = []
        stop: AirlockError | None = None  # a refusal that ends the call once the answers are in
        position = 0
        backoff_s, progress_at, retry_at, reason = BUSY_RETRY_S, time.monotonic(), 0.0, ""
        self.unanswered = []
        try:
            while (stop is None and (position < len(queue) or refused)) or waiting:
                now = time.monotonic()
                if stop is None and refused and now >= retry_at:
                    if now - progress_at > patience_s:
                        left = len(queue) - position + len(refused) + len(waiting)
                        raise QueueFull(f"the broker at {self.endpoint} refused: {reason}; nothing was accepted "
                                        f"for {patience_s:g} s; {left} emails not taken, try them again later")
                    self._send(refused, waiting)
                    refused = []
                room = min(WINDOW - len(waiting), len(queue) - position)
                if stop is None and room > 0 and not refused:  # a batch: the broker accepts them in one turn, one fsync
                    self._send(queue[position:position + room], waiting)
                    position += room
                if not waiting:
                    time.sleep(max(0.0, retry_at - time.monotonic()))
                    continue
                match self._next():
                    case Accepted(ref=ref, message_id=message_id) if ref in waiting:
                        backoff_s, progress_at = BUSY_RETRY_S, time.monotonic()
                        yield waiting.pop(ref), message_id
                    case Refused(ref=ref, code="queue_full", reason=reason) if ref in waiting:
                        if not refused:
                            retry_at = time.monotonic() + backoff_s
                            backoff_s = min(backoff_s * 2, BUSY_RETRY_MAX_S)
                        refused.append(waiting.pop(ref))
                    case Refused(ref=ref, code="disk_full", reason=why) if ref in waiting:
                        waiting.pop(ref)
                        stop = stop or DiskFull(f"not accepted: disk full (the broker at {self.endpoint}: {why}); "
                                                "try again once it has space")
                    case Refused(ref=ref, reason=why) if ref in waiting:
                        waiting.pop(ref)
                        stop = stop or RequestRefused(f"the broker at {self.endpoint} refused an email: {why}")
            if stop is not None:
                raise stop
        finally:  # before the handshake nothing left this client: what waits was never sent
            self.unanswered = list(waiting.values()) if self._channel.may_have_delivered() else []

    def submit_one(self, item: Email) -> str:
        """Submit one email and return its message id, or raise BrokerUnreachable (a socket
        error included; QueueFull once the queue stayed full for timeout_s): what the SMTP
        intake (451, so the sender retries) and the dashboard hand over, one at a time, each
        with someone waiting on the answer."""
        try:
            for _, message_id in self.submit([item], busy_wait_s=min(self.busy_wait_s, self.timeout_s)):
                return message_id
        except zmq.ZMQError as exc:
            raise BrokerUnreachable(f"the broker at {self.endpoint} failed: {exc}") from exc
        raise BrokerUnreachable(f"the broker at {self.endpoint} accepted nothing")  # submit yields or raises

    def _send(self, items: list[Email], waiting: dict[int, Email]) -> None:
        submits: list[Message] = []
        for item in items:
            self._ref += 1
            waiting[self._ref] = item
            submits.append(Submit.carrying(self._ref, item))
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
        """Yield each id's Result as it arrives; stop at the deadline (stragglers are not yielded).

        The broker bounds an Await's ids (AIRLOCK_AWAIT_MAX_IDS) and the ids one client waits
        on (AIRLOCK_AWAIT_MAX_WAITERS): Awaits go out in chunks within the first, and no more
        ids at once than the second, more as answers come in. A chunk refused anyway (the
        broker's bounds are smaller than this client's settings say) goes again a little
        later, when fewer are outstanding."""
        missing = set(ids)
        size = max(1, min(self._await_max_ids, AWAIT_CHUNK))
        chunks = collections.deque(ids[start:start + size] for start in range(0, len(ids), size))
        sent: dict[int, list[str]] = {}  # ref -> its ids, to send again if refused whole
        awaited: set[str] = set()  # sent, not yet answered

        def send_more() -> None:
            while chunks and (not awaited or len(awaited) + len(chunks[0]) <= self._await_max_waiters):
                part = chunks.popleft()
                self._ref += 1
                sent[self._ref] = part
                awaited.update(part)
                self._channel.send(Await(ref=self._ref, ids=part))

        send_more()
        deadline = time.monotonic() + timeout_s
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            match self._next(min(left, BUSY_RETRY_MAX_S), raise_on_silence=False):
                case Result(message_id=message_id) as result if message_id in missing:
                    missing.discard(message_id)
                    awaited.discard(message_id)
                    send_more()
                    yield result
                case Refused(message_id=message_id) if message_id in missing:
                    missing.discard(message_id)  # unknown to the broker: no outcome will come
                    awaited.discard(message_id)
                    send_more()
                case Refused(ref=ref, code="too_many_ids" | "too_many_waiters") if ref in sent:
                    part = sent.pop(ref)
                    awaited.difference_update(part)
                    chunks.appendleft(part)  # again after the next answer, or the next quiet spell
                case None:
                    send_more()

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

    def notice(self, event: str, **detail: Note) -> None:
        self._channel.send(Notice(event=event, detail=detail))

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
