"""An OpenAI-compatible /v1/chat/completions client that returns values, never raises.

Each way the model can fail is a ModelFailure kind: refused (nothing listening), timeout,
http_error, bad_body (not the JSON we asked for), unreachable. The client ignores proxy
settings on purpose: the model is a local service, and the reader talks to nothing else.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from typing import Annotated, Any, BinaryIO, Literal

import msgspec

from airlock.settings import model_api_url, model_server_root

MAX_BODY_BYTES = 1024 * 1024
MAX_TOKENS = 24  # the answer is one short value; a long answer is already a wrong one

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ModelAnswer(msgspec.Struct, frozen=True):
    text: str
    ms: float
    constraint: str = ""  # the constraint the request carried (reader/constraint.py), if any


class ModelFailure(msgspec.Struct, frozen=True):
    kind: Literal["refused", "timeout", "http_error", "bad_body", "unreachable", "not_configured"]
    detail: str
    status: int = 0  # the HTTP status of an http_error


class _ChatMessage(msgspec.Struct):
    content: str


class _ChatChoice(msgspec.Struct):
    message: _ChatMessage


class _ChatResponse(msgspec.Struct):
    choices: list[_ChatChoice]


_response = msgspec.json.Decoder(_ChatResponse)


def completions_url(base: str) -> str:
    return model_api_url(base, "chat/completions")


def ask(url: str, model: str, messages: list[dict[str, str]], timeout_s: float,
        extra: dict[str, Any] | None = None) -> ModelAnswer | ModelFailure:
    """One chat completion; `extra` adds request fields (a constraint: reader/constraint.py)."""
    body = msgspec.json.encode({"model": model, "messages": messages, "temperature": 0,
                                "max_tokens": MAX_TOKENS, "stream": False, **(extra or {})})
    request = urllib.request.Request(completions_url(url), data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    raw = _fetch(request, url, timeout_s, started)
    if isinstance(raw, ModelFailure):
        return raw
    try:
        parsed = _response.decode(raw)
        text = parsed.choices[0].message.content
    except (msgspec.DecodeError, IndexError) as exc:
        return ModelFailure("bad_body", f"not a chat completion: {exc}")
    return ModelAnswer(text=text, ms=round((time.monotonic() - started) * 1000, 1))


class ServerProps(msgspec.Struct):
    """What llama.cpp's server says of itself at GET /props (other fields ignored)."""

    total_slots: Annotated[int, msgspec.Meta(ge=1, le=4096)]


_props = msgspec.json.Decoder(ServerProps)


def llama_cpp_props(url: str, timeout_s: float) -> ServerProps | ModelFailure:
    """llama.cpp's GET /props: how many requests the server serves at once. Any other server
    answers it with an error (http_error) or a body without total_slots (bad_body)."""
    request = urllib.request.Request(model_server_root(url) + "/props", method="GET")
    raw = _fetch(request, url, timeout_s, time.monotonic())
    if isinstance(raw, ModelFailure):
        return raw
    try:
        return _props.decode(raw)
    except msgspec.DecodeError as exc:
        return ModelFailure("bad_body", f"not llama.cpp's /props: {exc}")


def _fetch(request: urllib.request.Request, url: str, timeout_s: float, started: float) -> bytes | ModelFailure:
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            raw = _read_within(response, started + timeout_s)
    except urllib.error.HTTPError as exc:
        return ModelFailure("http_error", f"HTTP {exc.code} {exc.reason}", exc.code)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return ModelFailure("refused", f"connection refused at {url}")
        if isinstance(exc.reason, (socket.timeout, TimeoutError)):
            return ModelFailure("timeout", f"no answer within {timeout_s} s")
        return ModelFailure("unreachable", str(exc.reason))
    except TimeoutError:
        return ModelFailure("timeout", f"no answer within {timeout_s} s")
    except (OSError, ValueError) as exc:  # resets, bad URLs, http.client protocol errors
        return ModelFailure("unreachable", f"{type(exc).__name__}: {exc}")
    if raw is None:
        return ModelFailure("bad_body", f"response body over {MAX_BODY_BYTES} bytes")
    return raw


def _read_within(response: BinaryIO, deadline: float) -> bytes | None:
    """Read the body in chunks, stopping at the size cap; a slow drip still hits the deadline."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = response.read(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
