"""A killed actor that nothing restarts, on real processes.

The compose lab runs each service alone, with no `airlock up` to restart it: Docker does
not restart a container stopped with `docker kill` (docs/compose.md). These
processes are started the same way, one `python -m <service>` each, so killing the actor
leaves its stage with no worker, as there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock import records, trace
from tests.conftest import ROOT, airlock_env
from tests.integration.conftest import wait_until

SEED = str(ROOT / "samples" / "seed_4411_de.eml")
WAIT_S = 4  # AIRLOCK_NO_WORKER_WAIT_S here: short, so the test does not wait 300 s


class Services:
    """broker, reader, validator and actor, each its own process, on this test's data dir."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.env = {**os.environ, **airlock_env(self.data, AIRLOCK_NO_WORKER_WAIT_S=str(WAIT_S)),
                    "PYTHONPATH": str(ROOT)}
        self.env.pop("AIRLOCK_KEYS", None)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> Services:
        made = self.airlock("keys", "--out", str(self.data / "keys"))
        assert made.returncode == 0, made.stderr
        for service in ("broker", "reader", "validator", "actor"):
            self.processes[service] = subprocess.Popen([sys.executable, "-m", service], env=self.env, cwd=ROOT,
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_until(lambda: self.workers() == {"reader": 1, "validator": 1, "actor": 1}, 60), self.workers()
        return self

    def airlock(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "airlock", *args], env=self.env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    def status(self) -> dict:
        done = self.airlock("status", "--json", "--timeout", "2")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def workers(self) -> dict:
        return self.status().get("workers", {})

    def outcomes(self) -> dict[str | None, dict]:  # None: an outcome line about no email (none is expected)
        return {r.message_id: trace.as_line(r) for r in trace.read(self.data / "trace.jsonl")
                if isinstance(r, records.OutcomeLine)}

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    made = Services(tmp_path)
    try:
        yield made.start()
    finally:
        made.stop()


def test_emails_for_a_killed_actor_show_in_status_then_end_failed(services: Services) -> None:
    """Emails passed for a killed actor show in `airlock status` waiting with no actor, and
    after AIRLOCK_NO_WORKER_WAIT_S each ends `failed` naming the actor and the wait; no call ran."""
    services.processes["actor"].kill()
    services.processes["actor"].wait()
    assert wait_until(lambda: services.workers().get("actor") == 0, 30), services.status()
    injected = services.airlock("inject", "--json", SEED, SEED, SEED)
    assert injected.returncode == 0, injected.stderr
    ids = [json.loads(line)["id"] for line in injected.stdout.splitlines()]
    assert len(ids) == 3

    def shown_waiting() -> bool:
        return services.status().get("waiting", {}).get("actor", {}).get("no_worker") == 3

    assert wait_until(shown_waiting, 30), services.status()
    text = services.airlock("status").stdout
    assert "stuck at the actor stage: 3 waiting with no actor connected or heard from" in text, text
    assert wait_until(lambda: set(ids) <= set(services.outcomes()), 30), services.outcomes()
    for message_id in ids:
        outcome = services.outcomes()[message_id]
        assert outcome["outcome"] == "failed" and outcome["ended_at"] == "actor", outcome
        assert "no actor was connected" in outcome["reason"] and "AIRLOCK_NO_WORKER_WAIT_S" in outcome["reason"]
        assert outcome["no_worker_s"] >= WAIT_S
    assert list(trace.read_calls(services.data / "calls.jsonl")) == []
    assert services.status().get("waiting") == {}


def test_emails_for_a_paused_actor_under_airlock_up_end_failed(stack) -> None:
    """`airlock up` restarts a child that exits, not one that stops answering (SIGSTOP):
    before, emails passed to the actor stage once the broker had let the silent actor go
    waited with no outcome for as long as it stayed paused. Now they end `failed` after
    AIRLOCK_NO_WORKER_WAIT_S; once the actor runs again it is never sent them."""
    s = stack(AIRLOCK_NO_WORKER_WAIT_S=str(WAIT_S)).start()
    actor = s.pid("actor")
    os.kill(actor, signal.SIGSTOP)
    try:
        # Idle and silent past heartbeat liveness: the broker lets it go (worker_lost).
        assert wait_until(lambda: s.status().get("workers", {}).get("actor") == 0, 60)
        injected = s.airlock("inject", "--json", SEED, SEED)
        assert injected.returncode == 0, injected.stderr
        ids = [json.loads(line)["id"] for line in injected.stdout.splitlines()]

        def ended() -> dict[str, dict]:
            return {r["message_id"]: r for r in s.trace(event="outcome") if r["message_id"] in ids}

        assert wait_until(lambda: len(ended()) == 2, 60), s.trace()[-20:]
        for outcome in ended().values():
            assert outcome["outcome"] == "failed" and outcome["ended_at"] == "actor", outcome
            assert "no actor was connected, or heard from" in outcome["reason"], outcome
    finally:
        os.kill(actor, signal.SIGCONT)
    assert wait_until(lambda: s.status().get("workers", {}).get("actor") == 1, 60)
    assert [c for c in s.calls() if c["message_id"] in ids] == []
    done = s.inject(SEED)  # the resumed actor serves new mail
    assert done[0]["outcome"] == "completed", done
