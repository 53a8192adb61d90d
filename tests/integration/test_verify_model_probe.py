"""`airlock verify`'s probe of the model from the reader's container (ops/verify.py
MODEL_CLOSED), run here against a server on loopback: any open endpoint fails the check."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

import pytest

from ops import verify


class _Endpoints(http.server.BaseHTTPRequestHandler):
    """A model server whose open paths a test sets (OPEN); every other path answers 403."""

    OPEN: frozenset[str] = frozenset()

    def _answer(self) -> None:
        self.send_response(200 if f"{self.command} {self.path}" in self.OPEN else 403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # http.server's naming
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("open_paths", "ok"), [
    (frozenset(), True), (frozenset({"GET /tools"}), False), (frozenset({"GET /slots"}), False),
    (frozenset({"POST /props"}), False)])
def test_the_model_probe_finds_any_open_endpoint(open_paths: frozenset[str], ok: bool) -> None:
    """The probe the reader's container runs against the model: tools, the slots monitor
    and POST /props must each answer as closed; one open, and the check fails naming it."""
    handler = type("Handler", (_Endpoints,), {"OPEN": open_paths})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = subprocess.run([sys.executable, "-S", "-c", verify.MODEL_CLOSED,
                               f"http://127.0.0.1:{server.server_address[1]}"], capture_output=True, text=True,
                              timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    check = verify.model_closed(done.stdout)
    assert check.ok is ok, check
    assert ok or next(iter(open_paths)) in check.reason
