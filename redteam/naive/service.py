"""`python -m redteam.naive.service`: the naive agent over HTTP, for the page's naive pane.

    POST /run     the raw email bytes (at most MAX_EMAIL_BYTES), header X-Airlock-Format:
                  eml|text, optional X-Airlock-Id (ID_PATTERN; default naive-<8 hex>-<n>)
                  -> 200 {"id","outcome","reason","answer","calls":[{step,server,tool,args}],
                  "ms","model","constrained"}: the line `airlock naive` prints, without `file`.
                  400 a bad header or body, 409 an id this service already ran, 411 no
                  Content-Length, 413 over the size, 503 busy. Every answer is JSON.
    GET  /about   {"model", "constrained", "why", "task"}: which model and why, for the pane
    GET  /health  200 "ok"

Settings (the environment): AIRLOCK_NAIVE_LISTEN (host:port, default 0.0.0.0:8090),
AIRLOCK_NAIVE_MODEL (smollm2 or worst-case: models.py), AIRLOCK_MODEL_URL (smollm2's server),
AIRLOCK_DATA_DIR (its own calls.jsonl, never the actor's), AIRLOCK_TASK (named in /about),
AIRLOCK_CATALOG (the tools it has; default the actor's shipped catalog).

One email at a time: the agent runs under one lock. A request that finds it taken waits
its turn, at most MAX_WAITING of them and each at most QUEUE_WAIT_S; one more, or one that
waited too long, is answered 503 with Retry-After, so a burst from the page is served in
order and a flood is refused without piling up. At most MAX_CONNECTIONS connections are
served at once (one more is answered 503 and closed), and a client that sends nothing for
READ_TIMEOUT_S is dropped. Standard library only besides the kernel's own dependencies:
the naive image carries nothing else. Whatever the email made (answer, reason, args) is
written with airlock.terminal.json_line: no raw bidi or invisible character leaves here.
"""

from __future__ import annotations

import collections
import http.server
import os
import re
import socket
import sys
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actor import catalog as catalog_module
from actor.calllog import CallLog
from actor.ledger import LedgerBusy, LedgerError
from airlock import settings as settings_module, task as task_module
from airlock.errors import EX_CONFIG, EX_TEMPFAIL, ConfigError
from airlock.terminal import json_line, shown
from redteam.naive import models
from redteam.naive.agent import NaiveAgent

DEFAULT_LISTEN = "0.0.0.0:8090"
MAX_EMAIL_BYTES = 262144  # as the broker's default max_email_bytes
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}\Z")
FORMATS = ("eml", "text")
MAX_WAITING = 4  # requests waiting for the agent; one more is answered 503 at once
QUEUE_WAIT_S = 30.0  # how long one waits for its turn before it is answered 503
RETRY_AFTER_S = 5
MAX_CONNECTIONS = 32  # connections served at once; one more is answered 503 and closed
READ_TIMEOUT_S = 10.0  # a client silent this long (headers or body) is dropped
IDS_REMEMBERED = 100_000  # ids already run, so a repeated X-Airlock-Id is refused (409)
ANSWER_LIMIT = 2000  # characters of the model's answer in the line, as `airlock naive`

_BUSY_BODY = b'{"error": "too many connections; try again"}'
BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Retry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
        % (RETRY_AFTER_S, len(_BUSY_BODY), _BUSY_BODY))


class Refused(Exception):
    """A request answered with an error status; the message is the JSON's `error`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NaiveService:
    """The naive agent, one email at a time, with what /about says of it."""

    def __init__(self, agent: NaiveAgent, model: models.NaiveModel, task: str) -> None:
        self.agent, self.model, self.task = agent, model, task
        self.prefix = uuid.uuid4().hex[:8]
        self._turn = threading.Lock()
        self._guard = threading.Lock()  # waiting count, id counter and ids run
        self._waiting = 0
        self._count = 0
        self._ran: collections.OrderedDict[str, None] = collections.OrderedDict()

    def about(self) -> dict[str, Any]:
        return {"model": self.model.name, "constrained": self.model.constrained, "why": self.model.why,
                "task": self.task}

    def run(self, raw: bytes, fmt: str, given_id: str | None) -> dict[str, Any]:
        """The agent's result on one email as the JSON line; Refused for a request it will not run."""
        if fmt not in FORMATS:
            raise Refused(400, f"X-Airlock-Format must be one of {', '.join(FORMATS)}")
        if given_id is not None and not ID_PATTERN.match(given_id):
            raise Refused(400, "X-Airlock-Id must be 1 to 64 of A-Z a-z 0-9 . _ : - (a letter or digit first)")
        with self._guard:
            if self._waiting >= MAX_WAITING:
                raise Refused(503, "the naive agent is busy; try again")
            self._waiting += 1
        try:
            if not self._turn.acquire(timeout=QUEUE_WAIT_S):
                raise Refused(503, f"the naive agent stayed busy for {QUEUE_WAIT_S:.0f} s; try again")
        finally:
            with self._guard:
                self._waiting -= 1
        try:
            message_id = self._claim(given_id)
            result = self.agent.handle(message_id, raw, fmt)
        finally:
            self._turn.release()
        return {"id": result.message_id, "outcome": result.outcome, "reason": result.reason,
                "answer": result.answer[:ANSWER_LIMIT], "calls": result.calls, "ms": result.ms,
                "model": self.model.name, "constrained": result.constrained}

    def _claim(self, given_id: str | None) -> str:
        with self._guard:
            if given_id is None:
                self._count += 1
                message_id = f"naive-{self.prefix}-{self._count}"
            elif given_id in self._ran:
                raise Refused(409, f"the id {given_id} was run already")
            else:
                message_id = given_id
            self._ran[message_id] = None
            if len(self._ran) > IDS_REMEMBERED:
                self._ran.popitem(last=False)
            return message_id


class Handler(http.server.BaseHTTPRequestHandler):
    server: Server
    timeout = READ_TIMEOUT_S  # the socket's timeout: a silent client is dropped
    server_version = "airlock-naive"
    sys_version = ""

    def do_GET(self) -> None:  # http.server's naming
        if self.path == "/health":
            self._send(200, b"ok", "text/plain; charset=utf-8")
        elif self.path == "/about":
            self._json(200, self.server.service.about())
        else:
            self._json(404, {"error": "not found: POST /run, GET /about, GET /health"})

    def do_POST(self) -> None:  # http.server's naming
        if self.path != "/run":
            self._json(404, {"error": "not found: POST /run, GET /about, GET /health"})
            return
        try:
            raw = self._body()
            line = self.server.service.run(raw, self.headers.get("X-Airlock-Format", ""),
                                           self.headers.get("X-Airlock-Id"))
        except Refused as refused:
            extra = {"Retry-After": str(RETRY_AFTER_S)} if refused.status == 503 else {}
            self._json(refused.status, {"error": str(refused)}, extra)
            return
        except LedgerError as exc:  # the call log refuses (a full disk): this email did not run whole
            self._json(500, {"error": f"the call log refuses: {exc}"})
            return
        except Exception as exc:  # noqa: BLE001  one email's surprise is its answer, never the service's end
            print(f"naive: {shown(type(exc).__name__)}: {shown(str(exc))[:500]}", file=sys.stderr, flush=True)
            self._json(500, {"error": f"the naive agent failed on this email: {type(exc).__name__}"})
            return
        self._json(200, line)
        print(json_line({"naive": line["id"], "outcome": line["outcome"], "calls": len(line["calls"])}), flush=True)

    def _body(self) -> bytes:
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise Refused(411, "a Content-Length is needed")
        try:
            length = int(length_text)
        except ValueError:
            raise Refused(400, "Content-Length is not a number") from None
        if length < 0:
            raise Refused(400, "Content-Length is negative")
        if length > MAX_EMAIL_BYTES:
            self.close_connection = True  # the body is never read
            raise Refused(413, f"the email is {length} bytes; at most {MAX_EMAIL_BYTES}")
        try:
            raw = self.rfile.read(length)
        except OSError as exc:  # the socket's timeout: a client that stopped sending
            self.close_connection = True
            raise Refused(400, f"the body did not arrive: {exc}") from None
        if len(raw) != length:
            raise Refused(400, f"the body ended after {len(raw)} of {length} bytes")
        if not raw.strip():
            raise Refused(400, "the email is empty")
        return raw

    def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, (json_line(value) + "\n").encode(), "application/json", headers)

    def _send(self, status: int, data: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client left; nothing to tell it

    def log_message(self, *args: Any) -> None:
        pass  # one line per email run is printed instead (do_POST)


class Server(http.server.ThreadingHTTPServer):
    """The HTTP server; at most MAX_CONNECTIONS handled at once."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: NaiveService) -> None:
        self.service = service
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def listen_address(text: str) -> tuple[str, int]:
    """host:port ([v6]:port too); ValueError otherwise."""
    host, colon, port_text = text.strip().rpartition(":")
    if not colon or not host:
        raise ValueError("must be host:port")
    return host.strip("[]"), settings_module.port(port_text)


def build(env: Mapping[str, str] | None = None) -> tuple[Server, CallLog, Path]:
    """The server, bound, its call log and where that is; ConfigError (bad settings, no model,
    no address to listen on) or LedgerError (an actor holds this data folder's ledger)."""
    env = os.environ if env is None else env
    read = settings_module.reader(env)
    address = read("AIRLOCK_NAIVE_LISTEN", listen_address, DEFAULT_LISTEN)
    kind = read("AIRLOCK_NAIVE_MODEL", models.kind_of, "smollm2")
    settings = settings_module.load(env)
    task = task_module.load(settings.task)
    catalog = catalog_module.load(settings.catalog or catalog_module.DEFAULT_PATH)
    model = models.choose(kind, catalog, settings.model_url, settings.model_name, settings.model_timeout_s)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = CallLog(settings.calls_path)
    try:
        agent = NaiveAgent(catalog, model.ask, log, task.value, constrained=model.constrained)
        server = Server(address, NaiveService(agent, model, task.name))
    except OSError as exc:
        log.close()
        raise ConfigError(f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}") from exc
    return server, log, settings.calls_path


def main() -> int:
    from airlock.service import stop_on_signals

    try:
        server, log, calls = build()
    except ConfigError as exc:
        print(f"naive: {shown(str(exc))}", file=sys.stderr)
        return EX_CONFIG
    except LedgerBusy as exc:
        print(f"naive: {shown(str(exc))}", file=sys.stderr)
        return EX_TEMPFAIL
    except (LedgerError, OSError) as exc:
        print(f"naive: {shown(str(exc))}", file=sys.stderr)
        return EX_CONFIG
    about = server.service.about()
    print(f"naive: {server.url}/run  model {about['model']}  task {about['task']}  calls {calls}", flush=True)
    stop = stop_on_signals()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
