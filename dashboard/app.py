"""The dashboard's routes: the page, its state, its event stream, and injection.

    GET  /             the page (static/index.html; assets under /static/)
    GET  /api/state    a snapshot: cards with their events, counters, the plan, the queue,
                       within one page's byte budget (snapshot.py)
    GET  /events       server-sent events (see stream.py); a client past its share of
                       streams, or any past the total, is answered 503 with Retry-After
    POST /api/inject   {"text": ...} or {"sample": NAME} -> {"id": message id}; NAME is a
                       listed ready email, or `demo/<file>` for a scenario step's email
    GET  /api/scenario the guided scenario as the page plays it (scenario.py); 404 or 422
                       with {"error": ...} when there is none or it is invalid

Every response carries a strict Content-Security-Policy (scripts and styles from this
origin only, nothing inline, no frames, no plugins) and the page renders every trace
string with textContent, so an email's `<script>` is text. Requests must name an
allowed Host (no DNS rebinding), and an injection must be JSON from this origin (a
cross-site form cannot send JSON without a CORS preflight, which is never granted).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock import measured
from airlock.errors import BrokerUnreachable
from airlock.settings import Settings
from airlock.transport import client_keys
from dashboard import inject, scenario
from dashboard.config import DashboardConfig
from dashboard.feed import TraceFeed
from dashboard.naive_pane import NaivePane
from dashboard.state import Board, shown
from dashboard.stream import Hub, Refused

STATIC = Path(__file__).resolve().parent / "static"
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies and dead-client detection honest
STREAMS_FULL_RETRY_S = 5  # Retry-After on a 503 for one stream too many (in all, or for its client)
MAX_REQUEST_BYTES = 2 * 1024 * 1024
MAX_TEXT_BYTES = 1024 * 1024  # the broker itself rejects emails over its own limit, with a rule

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]

_json = msgspec.json.Encoder()


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP response, errors and rejections included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                headers = [(n, v) for n, v in message.get("headers", []) if n.lower() not in names]
                message = {**message, "headers": headers + SECURITY_HEADERS}
            await send(message)

        await self.app(scope, receive, with_headers)


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_json.encode(data), status, media_type="application/json",
                    headers={"cache-control": "no-store", **(headers or {})})


MEASURED_FILE = "measured.json"  # `airlock attack --mode both --comparison demo/measured.json`


def _measured_for_page(found: measured.Measured | measured.MeasuredUnreadable | None) -> dict[str, Any] | None:
    """The corpus figures beside the naive pane, every text escaped as the cards' are."""
    if found is None:
        return None
    if isinstance(found, measured.MeasuredUnreadable):
        return {"error": shown(found.reason)}
    page: dict[str, Any] = msgspec.to_builtins(found)
    return {**page, "corpus": [shown(c) for c in found.corpus], "task": shown(found.task),
            "model": shown(found.model), "command": shown(found.command)}


def create_app(settings: Settings, config: DashboardConfig, plan: list[tuple[str, str]], *,
               live: bool = True, task: str = "") -> Starlette:
    """The app. `live=False` starts no trace feed (tests feed `app.state.hub` themselves).
    `task` and `plan` are the page's own task: a call line that records no plan (an older
    actor's) is judged against this one."""
    board = Board(plan, task=task)
    samples = {s.name: s for s in inject.load_samples(config.samples_dir)}
    # A step's task is checked against the folder of the page's own task: the stack's tasks.
    played, scenario_emails = scenario.for_page(config.demo_dir, settings.task.parent)
    injectable = {**samples, **scenario_emails}  # a listed name never holds a "/"
    naive = NaivePane(config.naive_model_url, settings.model_timeout_s, service_url=config.naive_url)
    trace_file = settings.trace_path

    compared = measured.read(config.demo_dir / MEASURED_FILE)  # read once: a file the trainer ships

    def extra() -> dict[str, Any]:
        return {"naive": naive.describe(), "measured": _measured_for_page(compared),
                "samples": [{"name": s.name, "label": s.label, "lang": s.lang, "category": s.category}
                            for s in samples.values()],
                "sources": {"stream": settings.endpoint("trace"),
                            "file": str(trace_file) if trace_file.is_file() else None}}

    hub = Hub(board, extra, max_streams=config.max_streams, max_streams_per_client=config.max_streams_per_client,
              buffer_bytes=config.stream_buffer_bytes)
    naive_runs: set[asyncio.Task[None]] = set()
    # The trace endpoint lets in the dashboard's key only; read at start: a bad key fails here.
    curve = client_keys(settings, "dashboard") if live else (None, None)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        feed = None
        about = asyncio.create_task(naive.watch_about(lambda: hub.publish_naive_pane(naive.describe())))
        if live:
            loop = asyncio.get_running_loop()
            feed = TraceFeed(settings.endpoint("trace"), trace_file,
                             lambda records: loop.call_soon_threadsafe(hub.publish, records),
                             settings.max_frame_bytes, curve).start()
        try:
            yield
        finally:
            hub.close()
            about.cancel()
            for task in list(naive_runs):
                task.cancel()
            await asyncio.gather(about, *naive_runs, return_exceptions=True)
            if feed is not None:
                await run_in_threadpool(feed.stop)

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    async def state(request: Request) -> Response:
        return Response(hub.state(), media_type="application/json", headers={"cache-control": "no-store"})

    async def events(request: Request) -> Response:
        opened = hub.subscribe(request.client.host if request.client else None)
        if isinstance(opened, Refused):  # the page's script tries again after a while
            return json_response({"error": opened.reason}, 503, headers={"retry-after": str(STREAMS_FULL_RETRY_S)})
        subscriber, first = opened
        unsent = [first]  # the snapshot, let go once sent: an open stream does not keep it
        del first

        async def stream() -> AsyncIterator[str]:
            try:
                yield unsent.pop()
                while True:
                    try:
                        message = await asyncio.wait_for(subscriber.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if message is None:
                        return
                    yield message
            finally:
                hub.unsubscribe(subscriber)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})

    async def run_naive(message_id: str, label: str, raw: bytes, fmt: str) -> None:
        hub.publish_naive({"id": message_id, "label": label, "status": "running"})
        result = await naive.run(message_id, raw, fmt)
        hub.publish_naive({**result, "label": label})

    async def inject_email(request: Request) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return json_response({"error": "send JSON (Content-Type: application/json)"}, 415)
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
            return json_response({"error": "injection is only taken from this page"}, 403)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_REQUEST_BYTES:
                return json_response({"error": f"request over {MAX_REQUEST_BYTES} bytes"}, 413)
        try:
            wanted = msgspec.json.decode(bytes(body), type=inject.InjectRequest)
            item, label = inject.email_for(wanted, injectable, MAX_TEXT_BYTES)
        except (msgspec.DecodeError, inject.InjectError) as exc:
            return json_response({"error": str(exc)}, 400)
        try:
            message_id = await run_in_threadpool(inject.submit, settings, item)
        except BrokerUnreachable as exc:
            return json_response({"error": str(exc)}, 503)
        if naive.enabled:
            task = asyncio.create_task(run_naive(message_id, label, item.raw, item.format))
            naive_runs.add(task)
            task.add_done_callback(naive_runs.discard)
        return json_response({"id": message_id, "label": label, "naive": naive.enabled})

    async def scenario_page(request: Request) -> Response:
        return json_response(played.body, played.status)

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/api/state", state),
            Route("/events", events),
            Route("/api/inject", inject_email, methods=["POST"]),
            Route("/api/scenario", scenario_page),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=config.allowed_hosts)],
        lifespan=lifespan,
    )
    app.state.hub = hub
    app.state.naive = naive
    return app
