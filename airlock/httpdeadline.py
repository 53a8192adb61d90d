"""One HTTP request held to one deadline, whatever the server does.

Data: a URL from the settings (the model server's) and what that server sends back.
Readers: reader.model (each model request) and ops.preflight (`airlock up`'s probes).
Rationale: a socket timeout bounds each read, not the answer. A server that sends one byte
a second, of its status line, its headers or its body (chunked or with a Content-Length),
never lets a read time out, and a client that trusts the timeout waits for ever. So the
request runs in a thread of its own (the stdlib's http.client, proxies ignored: the model
is a local service), the caller waits for it until the deadline only, and then shuts its
socket down, which ends the read the thread is blocked in at once; a socket connected after
that is closed as soon as it is made. The caller's wait is the deadline, whatever the thread
is doing (a name lookup included); the shutdown only frees the thread.
"""

from __future__ import annotations

import http.client
import math
import socket
import threading
import time
import urllib.parse
from typing import Literal

import msgspec

READ_BYTES = 65536  # the body is read in pieces this size, so the cap stops it early


class Answered(msgspec.Struct, frozen=True):
    """The server's status and, for a 2xx answer when asked for, its body (None: over the cap)."""

    status: int
    reason: str
    body: bytes | None = b""


class Unanswered(msgspec.Struct, frozen=True):
    """No HTTP answer: nothing listening (refused), none by the deadline (timeout), or any
    other failure to connect or to read one (unreachable)."""

    kind: Literal["refused", "timeout", "unreachable"]
    detail: str


def request(method: str, url: str, timeout_s: float, *, body: bytes | None = None,
            deadline: float | None = None, max_body_bytes: int = 0,
            headers: dict[str, str] | None = None) -> Answered | Unanswered:
    """`method` `url`, answered by `deadline` (a time.monotonic() value; at the latest
    `timeout_s` from now). A 2xx body is read when `max_body_bytes` is over 0, up to it.
    `headers` are sent besides (and over) the defaults: Connection: close, and a JSON
    Content-Type when there is a body."""
    deadline = min(time.monotonic() + timeout_s, math.inf if deadline is None else deadline)
    timeout = Unanswered("timeout", f"no answer within {timeout_s:g} s")
    if deadline <= time.monotonic():
        return timeout
    exchange = _Exchange(method, url, body, timeout_s, max_body_bytes, headers or {})
    worker = threading.Thread(target=exchange.run, name="http-deadline", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        exchange.abandon()
        return timeout
    return exchange.outcome or Unanswered("unreachable", "the request ended without an answer")


class _Exchange:
    """One request and its answer, in the thread request() starts. The socket is shut
    through a duplicate of its descriptor: that holds for a TLS socket too, whose first
    socket object is detached once the handshake starts."""

    def __init__(self, method: str, url: str, body: bytes | None, timeout_s: float, max_body_bytes: int,
                 headers: dict[str, str]) -> None:
        self.method, self.url, self.body, self.timeout_s = method, url, body, timeout_s
        self.headers = headers
        self.max_body_bytes = max_body_bytes
        self.outcome: Answered | Unanswered | None = None
        self._lock = threading.Lock()
        self._descriptor: int | None = None  # the open socket's, while the thread may read it
        self._abandoned = False

    def run(self) -> None:
        try:
            self.outcome = self._exchange()
        except ConnectionRefusedError:
            self.outcome = Unanswered("refused", f"connection refused at {self.url}")
        except TimeoutError:  # socket.timeout too: one read's timeout, as long as the deadline
            self.outcome = Unanswered("timeout", f"no answer within {self.timeout_s:g} s")
        except (OSError, ValueError, http.client.HTTPException) as exc:  # resets, bad URLs, protocol errors
            self.outcome = Unanswered("unreachable", f"{type(exc).__name__}: {exc}")

    def _exchange(self) -> Answered:
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=self.timeout_s)
        connection._create_connection = self._open  # type: ignore[attr-defined]  # http.client's socket factory, an attribute it calls
        try:
            headers = {"Connection": "close"}
            if self.body is not None:
                headers["Content-Type"] = "application/json"
            headers.update(self.headers)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            connection.request(self.method, target, body=self.body, headers=headers)
            response = connection.getresponse()
            body: bytes | None = b""
            if 200 <= response.status < 300 and self.max_body_bytes > 0:
                body = _read_capped(response, self.max_body_bytes)
            return Answered(response.status, response.reason, body)
        finally:
            with self._lock:
                self._descriptor = None
            connection.close()

    def _open(self, address: tuple[str, int], timeout: float, source: tuple[str, int] | None = None) -> socket.socket:
        sock = socket.create_connection(address, timeout, source)
        with self._lock:
            if self._abandoned:
                sock.close()
                raise TimeoutError("abandoned at the deadline")
            self._descriptor = sock.fileno()
        return sock

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._descriptor is not None:
                try:
                    with socket.fromfd(self._descriptor, socket.AF_INET, socket.SOCK_STREAM) as duplicate:
                        duplicate.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # the other side closed it already: the read ends anyway


def _read_capped(response: http.client.HTTPResponse, cap: int) -> bytes | None:
    """The body, or None once it passes `cap` bytes (read no further)."""
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read(READ_BYTES):
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
