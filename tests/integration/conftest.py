"""The real thing: `airlock up` as a child process on free loopback ports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import msgspec
import pytest

from airlock import records, trace
from tests.conftest import ROOT, airlock_env

UP_TIMEOUT_S = 120  # generous: CI runs this right after building images and fuzzing


class Stack:
    def __init__(self, tmp_path: Path, **extra_env: str) -> None:
        self.data = tmp_path / "data"
        task = extra_env.pop("task", None)
        self.env = {**os.environ, **airlock_env(self.data, Path(task) if task else None, **extra_env)}
        self.env["PYTHONPATH"] = str(ROOT)
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._up = threading.Event()

    def start(self, *args: str) -> Stack:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "airlock", "up", *args], env=self.env, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None  # piped
        self._stdout = self.process.stdout
        self._pumper = threading.Thread(target=self._pump, args=(self._stdout,), daemon=True)
        self._pumper.start()
        if not self._up.wait(UP_TIMEOUT_S):
            trace_tail = (self.data / "trace.jsonl").read_text()[-3000:] if (self.data / "trace.jsonl").exists() else ""
            raise AssertionError("airlock up did not come up:\n" + "".join(self.output) + "\ntrace:\n" + trace_tail)
        return self

    def _pump(self, stdout: IO[str]) -> None:
        for line in stdout:
            self.output.append(line)
            if line.startswith("airlock is up"):
                self._up.set()

    def airlock(self, *args: str, stdin: str | None = None, timeout: float = 120,
                cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "airlock", *args], env=self.env, cwd=cwd,
                              input=stdin, capture_output=True, text=True, timeout=timeout)

    def status(self) -> dict:
        """`airlock status --json`, read: {} while the broker does not answer."""
        done = self.airlock("status", "--json", "--timeout", "2")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def inject(self, *args: str, stdin: str | None = None) -> list[dict]:
        done = self.airlock("inject", "--json", "--wait", "--wait-timeout", "60", *args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    # Both files are JSON lines read with the kernel's reader, which skips a line a killed
    # process left half written (the crash tests poll these while they kill).
    def calls(self, message_id: str | None = None) -> list[dict]:
        """calls.jsonl's records (through the one decoder), each as its line holds it."""
        return [msgspec.to_builtins(call) for call in trace.read_calls(self.data / "calls.jsonl")
                if message_id is None or call.message_id == message_id]

    def trace(self, message_id: str | None = None, event: str | None = None) -> list[dict]:
        """The trace's records (through the one decoder), each as its line holds it; a
        damaged line (none is expected) is left out, as the readers leave it."""
        return [trace.as_line(r) for r in trace.read(self.data / "trace.jsonl", message_id)
                if not isinstance(r, records.Damaged) and (event is None or trace.event_of(r) == event)]

    def socket(self, role: str, key_role: str | None = None, curve: bool = True):
        """A DEALER to this stack's `role` endpoint, authenticated as `key_role` (default:
        the role itself), as a stranger (key_role="stranger"), or with no CURVE at all."""
        import zmq

        from airlock import keys
        from airlock.keys import Pair
        from airlock.transport import dealer

        client = server_key = None
        if curve:
            folder = self.data / "keys"
            server_key = keys.load(folder, "broker", secret=False).public
            client = Pair(*zmq.curve_keypair()) if key_role == "stranger" else keys.load(folder, key_role or role)
        port = self.env[f"AIRLOCK_{role.upper()}_PORT"]
        return dealer(zmq.Context.instance(), f"tcp://127.0.0.1:{port}", 4 * 1024 * 1024, client, server_key)

    def pid(self, service: str) -> int:
        return int((self.data / "run" / f"{service}.pid").read_text())

    def stop(self) -> int:
        if self.process is None:
            return 0
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(20)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
                    raise AssertionError("airlock up did not stop on SIGTERM") from None
            return self.process.returncode
        finally:
            self._pumper.join(5)
            self._stdout.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def make(**extra_env: str) -> Stack:
        made.append(Stack(tmp_path / f"stack{len(made)}", **extra_env))
        return made[-1]

    yield make
    for one in made:
        one.stop()


def wait_until(predicate, timeout_s: float = 20.0, every_s: float = 0.05) -> bool:
    """Poll a condition that a real process will make true; False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return predicate()
