"""A broker whose data dir fills up (a 2 MiB tmpfs): no crash, intake hears Refused code
disk_full, and once space returns it accepts again by itself. Needs root (mount)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from airlock import trace
from airlock.records import Started
from airlock.transport import dealer
from airlock.wire import Accepted, Refused, Submit, frames, outbound_decoder
from tests.conftest import ROOT, airlock_env
from tests.integration.conftest import wait_until
from tests.lines import json_object
from tests.tmpfs import own_tmpfs

# Bigger than a page: on a tmpfs a record that fits in the journal's last page is written
# even on a full disk (the page is already the file's), and is then rightly accepted.
EMAIL = b"Subject: order 7\n\nwhere is order 7?\n" + b"x" * 20_000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs of this test's own, always unmounted after it."""
    with own_tmpfs(tmp_path, "size=2m") as disk:
        yield disk


def _fill(disk: Path) -> Path:
    """Write a file until the disk refuses: nothing is left for anyone."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 4096)
    with contextlib.suppress(OSError), open(disk / "filler2", "wb", buffering=0) as handle:
        while True:
            handle.write(b"\0")
    return filler


class Intake:
    """A bare intake client: sends Submits, returns the broker's replies as they are."""

    def __init__(self, port: str) -> None:
        self.sock = dealer(zmq.Context.instance(), f"tcp://127.0.0.1:{port}", 4 * 1024 * 1024)
        self.decode, self.ref = outbound_decoder("intake"), 0

    def submit(self, count: int = 1) -> list[object]:
        submits = []
        for _ in range(count):
            self.ref += 1
            submits.append(Submit(ref=self.ref, raw=EMAIL, format="text"))
        for _, frame in frames(submits):
            self.sock.send(frame)
        replies: list[object] = []
        while len(replies) < count and self.sock.poll(10_000):
            replies += self.decode.frame(self.sock.recv())
        return replies

    def close(self) -> None:
        self.sock.close(linger=0)


def test_a_full_disk_refuses_intake_with_disk_full_and_the_broker_resumes_by_itself(small_disk: Path,
                                                                                     tmp_path: Path) -> None:
    """Today's broker died with a traceback on the first write to a full disk. Now: every
    Submit is answered (Refused, code disk_full) while the disk is full, the broker lives,
    and once the filler is removed it accepts again; the trace then holds storage_failed and
    storage_recovered, every received email exactly one outcome, and no half line."""
    data = small_disk / "data"
    env = {**os.environ, **airlock_env(data), "PYTHONPATH": str(ROOT)}
    stderr_path = tmp_path / "broker.stderr"
    with open(stderr_path, "w") as stderr:
        broker = subprocess.Popen([sys.executable, "-m", "broker", "--insecure"], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=stderr)
    intake = Intake(env["AIRLOCK_INTAKE_PORT"])
    try:
        assert wait_until(lambda: any(isinstance(r, Started) for r in trace.read(data / "trace.jsonl")))
        [before] = intake.submit()
        assert isinstance(before, Accepted)
        filler = _fill(small_disk)

        while_full = intake.submit(3) + intake.submit(2)
        assert broker.poll() is None, stderr_path.read_text()
        assert len(while_full) == 5, stderr_path.read_text()
        assert all(isinstance(r, Refused) and r.code == "disk_full" and "disk full" in r.reason
                   for r in while_full), while_full

        filler.unlink()
        (small_disk / "filler2").unlink()
        assert wait_until(lambda: isinstance(intake.submit()[0], Accepted), timeout_s=30, every_s=0.2)
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(20) == 0, stderr_path.read_text()
    finally:
        intake.close()
        if broker.poll() is None:
            broker.kill()
            broker.wait()
    raw_lines = (data / "trace.jsonl").read_bytes().splitlines()
    parsed = [json_object(line) for line in raw_lines]
    records = [record for record in parsed if record is not None]
    assert len(records) == len(parsed), "a half-written trace line"
    events = [r["event"] for r in records]
    assert "storage_failed" in events and "storage_recovered" in events
    received = [r["message_id"] for r in records if r["event"] == "received"]
    outcomes = [r["message_id"] for r in records if r["event"] == "outcome" and r.get("final")]
    failed = [r for r in records if r["event"] == "outcome" and r.get("outcome") == "failed"]
    assert all(outcomes.count(i) <= 1 for i in received)
    assert all("not accepted" in r["reason"] for r in failed)
    assert "disk_full" in stderr_path.read_text() and "Traceback" not in stderr_path.read_text()
    assert errno.ENOSPC  # the tmpfs is what made it full, not a mock


def test_a_trace_the_disk_refuses_pauses_intake_and_loses_no_line(tmp_path: Path, monkeypatch) -> None:
    """Only the trace refused (os.write to trace.jsonl fails with ENOSPC): the broker keeps
    running, refuses intake with disk_full while its lines wait, then writes every one of
    them, whole and in order (started first, storage_failed, storage_recovered), and accepts."""
    from airlock import settings as settings_module
    from broker.app import serve
    from tests.unit.test_storage_faults import Disk

    disk = Disk(monkeypatch, "trace.jsonl", room=0)
    settings = settings_module.load({**airlock_env(tmp_path / "data"), "AIRLOCK_INSECURE": "1"})
    stop = threading.Event()
    broker = threading.Thread(target=serve, args=(settings, None, stop), daemon=True)
    broker.start()
    intake = Intake(str(settings.ports["intake"]))
    try:
        refused = intake.submit(2)
        assert [(type(r), getattr(r, "code", "")) for r in refused] == [(Refused, "disk_full")] * 2, refused
        assert broker.is_alive()
        disk.room = None
        replies: list[object] = []

        def accepted_again() -> bool:
            replies.extend(intake.submit())
            return isinstance(replies[-1], Accepted)

        assert wait_until(accepted_again, timeout_s=30, every_s=0.2)
        accepted = [r.message_id for r in replies if isinstance(r, Accepted)]
    finally:
        intake.close()
        stop.set()
        broker.join(20)
    assert not broker.is_alive()
    parsed = [json_object(line) for line in settings.trace_path.read_bytes().splitlines()]
    records = [record for record in parsed if record is not None]
    assert len(records) == len(parsed), "a half-written trace line"
    events = [r["event"] for r in records]
    assert events[:2] == ["started", "storage_failed"] and "storage_recovered" in events and events[-1] == "stopped"
    assert accepted and [r["message_id"] for r in records if r["event"] == "received"] == accepted
    assert events.index("storage_recovered") < events.index("received")  # none received while refusing
