"""CURVE with ZAP allow lists: strangers, plaintext peers and keys on the wrong endpoint
are refused at the handshake, counted and recorded; the broker fails closed."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from airlock import keys, transport
from airlock.wire import Ping, encode, outbound_decoder
from tests.conftest import ROOT, airlock_env, free_ports
from tests.integration.conftest import wait_until


def answers_ping(sock: zmq.Socket) -> bool:
    sock.send(encode(Ping(ref=1)))
    ok = bool(sock.poll(1500))
    if ok:
        assert outbound_decoder("intake")(sock.recv()).__class__.__name__ == "Status"
    sock.close(linger=0)
    return ok


@pytest.mark.parametrize(("key_role", "curve", "reason"), [
    pytest.param("intake", True, None, id="own-key-answered"),
    pytest.param("stranger", True, "key not allowed", id="unknown-key"),
    pytest.param(None, False, "handshake", id="null-security"),
    pytest.param("reader", True, "key not allowed", id="reader-key-on-intake"),
    pytest.param("actor", True, "key not allowed", id="actor-key-on-intake"),
])
def test_only_the_roles_own_key_gets_through(stack, key_role, curve, reason) -> None:
    """On the intake endpoint only the intake key is answered; the rest are refused and recorded."""
    s = stack().start()
    assert answers_ping(s.socket("intake", key_role, curve)) is (reason is None)
    if reason is not None:
        assert wait_until(lambda: any(reason in t["reason"] for t in s.trace(event="auth_refused")))
        assert s.status()["counters"].get("auth_refused.intake", 0) >= 1


@pytest.mark.parametrize("role", ["reader", "validator", "actor"])
def test_a_valid_key_on_another_roles_endpoint_is_refused(stack, role) -> None:
    """The intake's key cannot register as a worker: the worker count does not move."""
    s = stack().start()
    sock = s.socket(role, "intake")
    sock.send(b"anything")
    assert wait_until(lambda: any(t["endpoint"] == role for t in s.trace(event="auth_refused")))
    sock.close(linger=0)
    assert s.status()["workers"].get(role) == 1
    assert not [t for t in s.trace(event="malformed_frame") if t["endpoint"] == role]


def test_broker_refuses_to_start_without_allow_lists(tmp_path: Path) -> None:
    """Fail closed: with keys but an empty allow list the broker does not start."""
    folder = tmp_path / "keys"
    keys.generate(folder)
    for key in (folder / "allow" / "reader").iterdir():
        key.unlink()
    env = {**airlock_env(tmp_path / "data"), "AIRLOCK_KEYS": str(folder), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "broker"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78 and "refusing to start" in done.stderr


def test_keys_command(tmp_path: Path) -> None:
    """`airlock keys` writes a pair per role and refuses to overwrite without --force."""
    out = tmp_path / "k"
    first = subprocess.run([sys.executable, "-m", "airlock", "keys", "--out", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=30)
    assert first.returncode == 0
    assert {p.name for p in out.glob("*.key_secret")} == {f"{r}.key_secret" for r in ("broker", *keys.CLIENT_ROLES)}
    assert (out / "reader.key_secret").stat().st_mode & 0o777 == 0o600
    again = subprocess.run([sys.executable, "-m", "airlock", "keys", "--out", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=30)
    assert again.returncode == 78 and "--force" in again.stderr


def listener_once_free(port: int) -> socket.socket:
    """A TCP listener on `port`, once a closed ZeroMQ socket's I/O thread has let go of it."""
    bound: list[socket.socket] = []

    def bind() -> bool:
        try:
            bound.append(socket.create_server(("127.0.0.1", port)))
        except OSError:
            return False
        return True

    assert wait_until(bind, timeout_s=5.0), f"port {port} stayed taken"
    return bound[0]


def test_a_broker_restart_with_the_same_keys_is_not_a_refused_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client whose first handshake succeeded, then met a broker going down mid-handshake
    twice before it came back with the same keys, is never told its key was refused. The
    monitor is made slow to attach, so a channel that connects before it watches would miss
    that first success and keep counting failures for the socket's life."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    server, client = (keys.Pair(*zmq.curve_keypair()) for _ in range(2))
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    broker = transport.router(ctx, endpoint, 1 << 20, server, "intake")
    attach = zmq.Socket.get_monitor_socket

    def attach_once_the_client_has_shaken_hands(sock: zmq.Socket, events: int | None = None,
                                                addr: str | None = None) -> zmq.Socket:
        try:  # a frame flows only after the client's handshake succeeded, so once it arrives,
            sock.send(encode(Ping(ref=1)), zmq.NOBLOCK)  # a channel that connected first has
            broker.poll(1000)  # missed that event
        except zmq.Again:  # not connected yet: nothing to miss
            pass
        return attach(sock, events, addr)

    monkeypatch.setattr(zmq.Socket, "get_monitor_socket", attach_once_the_client_has_shaken_hands)
    channel = transport.ZmqChannel(ctx, endpoint, 1 << 20, client, server.public, watch_handshake=True)
    try:
        channel.send(Ping(ref=1))
        assert broker.poll(5000), "the first broker never heard the client"
        broker.close(linger=0)
        # The broker going down: it takes each connection and drops it before the handshake ends.
        with listener_once_free(port) as going_down:
            going_down.settimeout(5.0)
            for _ in range(transport.REPEATS_BEFORE_REFUSED + 1):
                going_down.accept()[0].close()
                assert channel.recv(0.05) is None
        broker = transport.router(ctx, endpoint, 1 << 20, server, "intake")  # back, same keys
        channel.send(Ping(ref=2))
        assert channel.recv(0.5) is None  # reads every handshake event: none may refuse this key
        assert broker.poll(5000), "the restarted broker never heard the client"
    finally:
        channel.close()
        broker.close(linger=0)


def test_broker_without_keys_refuses_to_start(tmp_path: Path) -> None:
    """No keys anywhere and no insecure switch: exit 78, one line naming AIRLOCK_KEYS and
    AIRLOCK_INSECURE, and nothing listens (a plaintext peer reaches no broker)."""
    env = {**airlock_env(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "broker"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    assert done.stderr.count("\n") == 1 and "AIRLOCK_KEYS" in done.stderr and "AIRLOCK_INSECURE=1" in done.stderr
    assert not (tmp_path / "data" / "trace.jsonl").exists()


@pytest.mark.parametrize("switch", [pytest.param({"AIRLOCK_INSECURE": "1"}, id="env"),
                                    pytest.param({}, id="flag")])
def test_broker_without_keys_serves_only_when_told_and_says_so(tmp_path: Path, switch: dict[str, str]) -> None:
    """AIRLOCK_INSECURE=1 (or --insecure): the broker serves without CURVE, and says so on
    stderr and in the trace's started line; a plaintext peer is then answered."""
    env = {**airlock_env(tmp_path / "data"), "PYTHONPATH": str(ROOT), **switch}
    command = [sys.executable, "-m", "broker", *([] if switch else ["--insecure"])]
    broker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        trace_path = tmp_path / "data" / "trace.jsonl"
        assert wait_until(lambda: trace_path.exists() and b'"started"' in trace_path.read_bytes(), timeout_s=30)
        started = next(line for line in trace_path.read_text().splitlines() if '"started"' in line)
        assert '"insecure":true' in started and "OFF" in started
        plain = transport.dealer(zmq.Context.instance(), f"tcp://127.0.0.1:{env['AIRLOCK_INTAKE_PORT']}",
                                 4096, None, None)
        assert answers_ping(plain)
    finally:
        broker.terminate()
        _, err = broker.communicate(timeout=30)
    assert "WARNING" in err and "AUTHENTICATION IS OFF" in err
