"""An OpenAI-compatible /v1/chat/completions client that returns values, never raises.

Each way the model can fail is a ModelFailure kind: refused (nothing listening), timeout,
http_error, bad_body (not the JSON we asked for), unreachable. The client ignores proxy
settings on purpose: the model is a local service, and the reader talks to nothing else.

The timeout is a deadline for the whole request (connecting, the status line, the headers
and the body), whatever the server does: airlock.httpdeadline holds it.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import msgspec

from airlock import httpdeadline
from airlock.settings import model_api_url, model_server_root

MAX_BODY_BYTES = 1024 * 1024
MAX_TOKENS = 24  # the answer is one short value; a long answer is already a wrong one

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
        extra: dict[str, Any] | None = None, deadline: float | None = None) -> ModelAnswer | ModelFailure:
    """One chat completion within `timeout_s` (and by `deadline`, a time.monotonic() value, if
    given); `extra` adds request fields (a constraint: reader/constraint.py)."""
    body = msgspec.json.encode({"model": model, "messages": messages, "temperature": 0,
                                "max_tokens": MAX_TOKENS, "stream": False, **(extra or {})})
    started = time.monotonic()
    raw = _fetch("POST", url, completions_url(url), body, timeout_s, deadline)
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


def llama_cpp_props(url: str, timeout_s: float, deadline: float | None = None) -> ServerProps | ModelFailure:
    """llama.cpp's GET /props: how many requests the server serves at once. Any other server
    answers it with an error (http_error) or a body without total_slots (bad_body)."""
    raw = _fetch("GET", url, model_server_root(url) + "/props", None, timeout_s, deadline)
    if isinstance(raw, ModelFailure):
        return raw
    try:
        return _props.decode(raw)
    except msgspec.DecodeError as exc:
        return ModelFailure("bad_body", f"not llama.cpp's /props: {exc}")


def _fetch(method: str, url: str, target: str, body: bytes | None, timeout_s: float,
           deadline: float | None) -> bytes | ModelFailure:
    """The body of a 2xx answer, by the deadline whatever the server does (airlock.httpdeadline)."""
    answer = httpdeadline.request(method, target, timeout_s, body=body, deadline=deadline,
                                  max_body_bytes=MAX_BODY_BYTES)
    if isinstance(answer, httpdeadline.Unanswered):
        return ModelFailure(answer.kind, f"connection refused at {url}" if answer.kind == "refused" else answer.detail)
    if not 200 <= answer.status < 300:
        return ModelFailure("http_error", f"HTTP {answer.status} {answer.reason}", answer.status)
    if answer.body is None:
        return ModelFailure("bad_body", f"response body over {MAX_BODY_BYTES} bytes")
    return answer.body
