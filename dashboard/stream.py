"""One board shared by every open page, fanned out as server-sent events.

Everything here runs on the app's event loop (the feed thread hands records over with
call_soon_threadsafe), so the board needs no lock. A page that connects gets, in one
step, a `snapshot` event and a queue of what follows, so nothing falls between the two.
Then, per trace record: a plain `data:` line holding the record itself (JSON, for any
consumer), and, when the record changed a card, a `card` event with that card and the
counters. Facts about no one email come as `system` events, the naive pane's runs as
`naive` events.

What a page costs is bounded: at most `max_streams` streams are open at once (one more
is refused, and the refused page retries), and at most `buffer_bytes` of events wait for
one page. A page too slow to keep up is dropped; its browser reconnects and starts again
from a fresh snapshot. A connection that takes nothing at all is closed by the server
(dashboard.__main__.stall_guard), which ends its stream here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec

from airlock import published
from dashboard.config import MAX_STREAMS, STREAM_BUFFER_BYTES
from dashboard.state import Board

RETRY_MS = 1000  # how soon a dropped or disconnected page reconnects

_json = msgspec.json.Encoder()


def sse(event: str | None, data: Any) -> str:
    """One event. JSON escapes newlines, so `data:` is always a single line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {_json.encode(data).decode()}\n\n"


class Subscriber:
    """One page's queue, bounded in bytes (a count bound let one slow page hold megabytes)."""

    def __init__(self, buffer_bytes: int = STREAM_BUFFER_BYTES) -> None:
        self.queue: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue()
        self.buffer_bytes = buffer_bytes
        self.queued_bytes = 0

    def put(self, message: str, size: int) -> bool:
        """Queue `message` (`size` bytes in UTF-8), or False if it would pass the budget."""
        if self.queued_bytes + size > self.buffer_bytes:
            return False
        self.queued_bytes += size
        self.queue.put_nowait((message, size))
        return True

    async def get(self) -> str | None:
        """The next event for this page, or None: the stream ends."""
        item = await self.queue.get()
        if item is None:
            return None
        self.queued_bytes -= item[1]
        return item[0]

    def end(self) -> None:
        """Drop what waits and end the stream: a dropped page starts again from a snapshot."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queued_bytes = 0
        self.queue.put_nowait(None)


class Hub:
    def __init__(self, board: Board, extra: Callable[[], dict[str, Any]] = dict, *,
                 max_streams: int = MAX_STREAMS, buffer_bytes: int = STREAM_BUFFER_BYTES) -> None:
        self.board = board
        self.extra = extra  # what else a snapshot carries (naive pane, samples, sources)
        self.subscribers: set[Subscriber] = set()  # pages that are sent what happens
        self.open: set[Subscriber] = set()  # streams not ended yet, dropped ones included
        self.max_streams, self.buffer_bytes = max_streams, buffer_bytes
        self.closed = False

    def snapshot(self) -> dict[str, Any]:
        return {**self.board.snapshot(), "waiting": self.board.waiting(), **self.extra()}

    def subscribe(self) -> tuple[Subscriber, str] | None:
        """A new page's queue and first event, or None when max_streams are open. A dropped
        page's stream counts until its connection ends: a page that reads nothing holds its
        slot until the server closes the connection (stall_guard)."""
        if len(self.open) >= self.max_streams and not self.closed:
            return None
        subscriber = Subscriber(self.buffer_bytes)
        if self.closed:
            subscriber.end()
        else:
            self.subscribers.add(subscriber)
            self.open.add(subscriber)
        return subscriber, f"retry: {RETRY_MS}\n" + sse("snapshot", self.snapshot())

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        self.open.discard(subscriber)

    def publish(self, records: list[dict[str, Any]]) -> None:
        for record in map(published.public, records):  # whatever the source, a page sees no customer data
            card = self.board.apply(record)
            self._send(sse(None, record))
            if card is not None:
                self._send(sse("card", {"card": card, "counters": self.board.counters}))
            elif not isinstance(record.get("message_id"), str) and isinstance(record.get("event"), str):
                self._send(sse("system", self.board.system[-1]))

    def publish_naive(self, entry: dict[str, Any]) -> None:
        self._send(sse("naive", self.board.naive_update(entry)))

    def close(self) -> None:
        """End every open stream (shutdown): pages see the server go, then reconnect."""
        self.closed = True
        for subscriber in list(self.subscribers):
            subscriber.end()
        self.subscribers.clear()

    def _send(self, message: str) -> None:
        size = len(message.encode())  # once: every page's queue holds this same string
        for subscriber in list(self.subscribers):
            if not subscriber.put(message, size):
                self.subscribers.discard(subscriber)
                subscriber.end()
