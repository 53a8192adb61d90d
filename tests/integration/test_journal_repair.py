"""A broker started on a damaged journal: it says what it skipped, on stderr and in the
trace, recovers every undamaged email, and names the damage as the reason for the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from airlock import records, trace
from broker.journal import Journal, QueuedEmail, positions
from tests.conftest import ROOT, airlock_env
from tests.integration.conftest import wait_until
from tests.lines import raw_line


def test_a_broker_on_a_journal_with_64_zero_bytes_reports_them_and_recovers_the_rest(tmp_path: Path) -> None:
    """Today 64 zero bytes hid every later record and each of those emails ended `failed`,
    "the broker stopped before accepting this email". Now only the record the zeros hit is
    lost, its email ends failed naming the damage, and stderr and the trace give the range."""
    data = tmp_path / "data"
    ids = [f"a1-{n}" for n in range(1, 21)]
    journal = Journal(data / "journal.bin")
    for message_id in ids:
        journal.append(QueuedEmail(message_id, b"Subject: order 7\n\n" + message_id.encode() * 200, "text"))
    journal.close()
    (data / "trace.jsonl").write_bytes(b"".join(raw_line("broker", "received", i, {}) for i in ids))
    hit = next(p for p in positions(data / "journal.bin") if p.message_id == "a1-8")
    with open(data / "journal.bin", "r+b") as handle:
        handle.seek(hit.offset)
        handle.write(bytes(64))
    env = {**os.environ, **airlock_env(data), "PYTHONPATH": str(ROOT)}
    broker = subprocess.Popen([sys.executable, "-m", "broker", "--insecure"], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: len(_events(data, "recovered")) == len(ids) - 1, timeout_s=30)
        broker.send_signal(signal.SIGTERM)
        _, stderr = broker.communicate(timeout=20)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.communicate()
    [report] = _events(data, "journal_damaged")
    assert report["ranges"] == [[hit.offset, hit.offset + hit.size]] and report["emails_lost"] == 1
    assert f"[{hit.offset},{hit.offset + hit.size}]" in stderr and "journal damaged" in stderr
    assert sorted(r["message_id"] for r in _events(data, "recovered")) == sorted(set(ids) - {"a1-8"})
    [lost] = _events(data, "outcome")
    assert lost["message_id"] == "a1-8" and "damage" in lost["reason"] and "stopped before" not in lost["reason"]


def _events(data: Path, event: str) -> list[dict]:
    """The broker's `event` records, each as its line holds it."""
    return [trace.as_line(r) for r in trace.read(data / "trace.jsonl")
            if isinstance(r, records.Record) and trace.event_of(r) == event]
