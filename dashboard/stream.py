"""One board shared by every open page, fanned out as server-sent events.

Everything here runs on the app's event loop (the feed thread hands records over with
call_soon_threadsafe), so the board needs no lock. A page that connects gets, in one
step, a `snapshot` event and a queue of what follows, so nothing falls between the two.
Then, per trace record: a plain `data:` line holding the record itself (JSON, for any
consumer), and, when the record changed a card, a `card` event with that card and the
counters. Facts about no one email come as `system` events, the naive pane's runs as
`naive` events. A page too slow to keep up is dropped; its browser reconnects and
starts again from a fresh snapshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec

from dashboard.state import Board

QUEUE_LIMIT = 2000  # events waiting for one page before it is dropped
RETRY_MS = 1000  # how soon a dropped or disconnected page reconnects

_json = msgspec.json.Encoder()


def sse(event: str | None, data: Any) -> str:
    """One event. JSON escapes newlines, so `data:` is always a single line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {_json.encode(data).decode()}\n\n"


class Subscriber:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_LIMIT)

    def put(self, message: str | None) -> bool:
        try:
            self.queue.put_nowait(message)
            return True
        except asyncio.QueueFull:
            return False

    def end(self) -> None:
        while not self.put(None):
            self.queue.get_nowait()


class Hub:
    def __init__(self, board: Board, extra: Callable[[], dict[str, Any]] = dict) -> None:
        self.board = board
        self.extra = extra  # what else a snapshot carries (naive pane, samples, sources)
        self.subscribers: set[Subscriber] = set()
        self.closed = False

    def snapshot(self) -> dict[str, Any]:
        return {**self.board.snapshot(), "waiting": self.board.waiting(), **self.extra()}

    def subscribe(self) -> tuple[Subscriber, str]:
        subscriber = Subscriber()
        if self.closed:
            subscriber.end()
        else:
            self.subscribers.add(subscriber)
        return subscriber, f"retry: {RETRY_MS}\n" + sse("snapshot", self.snapshot())

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def publish(self, records: list[dict[str, Any]]) -> None:
        for record in records:
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
        for subscriber in list(self.subscribers):
            if not subscriber.put(message):
                self.subscribers.discard(subscriber)
                subscriber.end()
