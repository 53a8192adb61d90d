"""The page's event streams under slow readers: capped in number, in all and per client,
bounded per stream, and a reader that takes nothing is disconnected, so memory stays flat."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

MAX_STREAMS, STALL_S, MAX_CONNECTIONS = 8, 1.0, 80
PER_CLIENT = 4  # of MAX_STREAMS, what one peer address may hold
SLOW_READERS = 60
KEEP_ALIVE_S = 5  # uvicorn's default: how long a 503'd connection may idle before it is closed
REQUEST = b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]) / 1024


@pytest.fixture
def page(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AIRLOCK_DASHBOARD_MAX_STREAMS": str(MAX_STREAMS),
           "AIRLOCK_DASHBOARD_STREAM_STALL_S": str(STALL_S),
           "AIRLOCK_DASHBOARD_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
           "AIRLOCK_DASHBOARD_MAX_STREAMS_PER_CLIENT": str(PER_CLIENT)}
    process = subprocess.Popen([sys.executable, "-m", "tests.integration.fed_dashboard", str(port), str(tmp_path)],
                               env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None  # piped
    try:
        assert process.stdout.readline().strip() == "ready"
        yield port, process
    finally:
        process.terminate()
        process.wait(10)
        process.stdout.close()


def slow_reader(port: int, source: str = "127.0.0.1") -> socket.socket:
    """Asks for the stream from `source`, then never reads: the smallest receive window it can have."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(REQUEST)
    return sock


def status_line(port: int, source: str = "127.0.0.1") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(REQUEST)
        return sock.recv(64).split(b"\r\n")[0]


def closed_by_server(sock: socket.socket, within_s: float = 2.0) -> bool:
    """Read what the server sent: True if the connection ends (closed or reset) within
    `within_s`, False if the server still streams or waits on it."""
    deadline = time.monotonic() + within_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(1 << 20):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        pass
    return False


def test_slow_readers_are_capped_dropped_and_cost_bounded_memory(page) -> None:
    """60 readers that never read: at most MAX_STREAMS are served, the rest get 503; the
    stalled ones are disconnected after STALL_S, memory does not grow with the readers, and
    a page that reads is served again afterwards."""
    port, process = page
    time.sleep(3)  # the board fills: every snapshot is then large (500 changing cards)
    before = rss_mb(process.pid)
    readers = [slow_reader(port, f"127.0.0.{2 + n % 10}") for n in range(SLOW_READERS)]
    time.sleep(0.5)
    answers = []
    for sock in readers:
        sock.settimeout(5)
        answers.append(sock.recv(64).split(b"\r\n")[0])
    assert answers.count(b"HTTP/1.1 200 OK") <= MAX_STREAMS, answers
    assert answers.count(b"HTTP/1.1 503 Service Unavailable") >= SLOW_READERS - MAX_STREAMS, answers
    peak = rss_mb(process.pid)
    time.sleep(STALL_S + KEEP_ALIVE_S + 1)  # nobody has read a byte since the status line
    connected = [sock for sock in readers if not closed_by_server(sock)]
    assert not connected, f"{len(connected)} slow readers still connected"
    assert status_line(port) == b"HTTP/1.1 200 OK"  # the slots came back
    assert peak - before < 80, f"{before:.0f} MB before {SLOW_READERS} slow readers, {peak:.0f} MB with them"
    for sock in readers:
        sock.close()


def test_connections_past_the_cap_are_refused(page) -> None:
    """MAX_CONNECTIONS idle connections held open: a request on one more is answered 503
    (each costs the server a little: without a cap there was no end to them); once they
    go, a request is served again."""
    port, _ = page
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.5)  # the server has accepted them all
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            extra.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert extra.recv(64).split(b"\r\n")[0] == b"HTTP/1.1 503 Service Unavailable"
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.5)
    assert status_line(port) == b"HTTP/1.1 200 OK"


def test_one_client_holding_its_share_cannot_lock_out_another(page) -> None:
    """One address holding every stream it can gets 503 past its share; another address is still served."""
    port, _ = page
    greedy = [slow_reader(port) for _ in range(MAX_STREAMS)]
    try:
        answers = []
        for sock in greedy:
            sock.settimeout(5)
            answers.append(sock.recv(64).split(b"\r\n")[0])
        assert answers.count(b"HTTP/1.1 200 OK") == PER_CLIENT, answers
        assert status_line(port) == b"HTTP/1.1 503 Service Unavailable"
        assert status_line(port, "127.0.0.2") == b"HTTP/1.1 200 OK"
    finally:
        for sock in greedy:
            sock.close()
