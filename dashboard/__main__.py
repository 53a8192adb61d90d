"""python -m dashboard [--host H] [--port N] [--naive-model-url URL]: the trainers' page.

Configuration errors (bad settings, an unreadable task file or key, a port it cannot
listen on, starlette or uvicorn missing) are one line on stderr and exit 78, which `airlock up` does
not retry. SIGTERM or SIGINT ends the open event streams first, so the server stops at
once instead of waiting on pages that never hang up, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator

from airlock import extras, settings as settings_module, task as task_module
from airlock.errors import EX_CONFIG, ConfigError
from dashboard.config import MAX_CONNECTIONS, STREAM_STALL_S

GRACEFUL_S = 3  # uvicorn's cap on waiting for connections after the streams are ended


def listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def stall_guard(stall_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing a connection whose peer takes nothing for `stall_s`
    while data waits for it. Without this, a page that never reads keeps its stream and
    everything written to it (a whole snapshot) for as long as it likes: back-pressure
    stops the writer, but nothing ends the connection."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class StallGuard(H11Protocol):
        _stalled: asyncio.TimerHandle | None = None

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stalled is None:
                self._stalled = self.loop.call_later(stall_s, self.transport.abort)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._unstall()

        def connection_lost(self, exc: Exception | None) -> None:
            self._unstall()
            super().connection_lost(exc)

        def _unstall(self) -> None:
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

    return StallGuard


async def serve(app, sock: socket.socket, stall_s: float = STREAM_STALL_S,
                max_connections: int = MAX_CONNECTIONS) -> None:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # the signals are ours (below): end the streams, then exit 0

    server = Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", loop="asyncio",
                                   http=stall_guard(stall_s), ws="none",
                                   limit_concurrency=max_connections, timeout_graceful_shutdown=GRACEFUL_S))

    def stop() -> None:
        app.state.hub.close()
        server.should_exit = True

    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop)
    await server.serve(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard", description="the trainers' live page")
    parser.add_argument("--host", help="listen here (default $AIRLOCK_DASHBOARD_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="(default $AIRLOCK_DASHBOARD_PORT or 8088)")
    parser.add_argument("--naive-model-url",
                        help="model for the naive pane (default $AIRLOCK_NAIVE_MODEL_URL; none: off)")
    args = parser.parse_args(argv)
    try:
        from dashboard import config as config_module

        settings = settings_module.load()
        config = config_module.load(host=args.host, port=args.port, naive_model_url=args.naive_model_url)
        task = task_module.load(settings.task)
        extras.require_extra("python -m dashboard", ("starlette", "uvicorn"), "dashboard")
        from dashboard.app import create_app  # needs starlette; uvicorn is imported by serve()

        app = create_app(settings, config, [(step.server, step.tool) for step in task.plan], task=task.name)
    except ConfigError as exc:
        print(f"dashboard: {exc}", file=sys.stderr)
        return EX_CONFIG
    try:
        sock = listen(config.host, config.port)
    except OSError as exc:
        print(f"dashboard: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CONFIG
    naive = app.state.naive
    where = f" via {naive.service_url}" if naive.service_url else ""
    print(f"dashboard: http://{config.host}:{config.port}/  trace from {settings.endpoint('trace')}; "
          f"naive pane {'on' + where if naive.enabled else naive.reason}", flush=True)
    try:
        asyncio.run(serve(app, sock, config.stream_stall_s, config.max_connections))
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
