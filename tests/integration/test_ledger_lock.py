"""Two real actor processes on one data dir: the second refuses to start (two actors
on one calls.jsonl, each with its own keys, would run the same emails' calls twice)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, airlock_env
from tests.integration.conftest import wait_until

START_TIMEOUT_S = 60  # generous: the machine is shared


def _actor(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "actor"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _holds_lock(lock: Path, process: subprocess.Popen[str]) -> bool:
    """Wait until `process` has written its pid into the ledger's lock (it holds it then)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if lock.exists() and lock.read_text().strip() == str(process.pid):
            return True
        time.sleep(0.05)
    return False


def _stop(process: subprocess.Popen[str]) -> int:
    process.terminate()
    try:
        return process.wait(timeout=START_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def test_a_second_actor_on_one_data_dir_refuses_to_start(tmp_path: Path) -> None:
    """The first actor holds calls.lock; a second exits 75 (EX_TEMPFAIL: the supervisor
    retries, and it starts once the first is gone) with one line naming the lock."""
    data = tmp_path / "data"
    env = {**os.environ, **airlock_env(data), "PYTHONPATH": str(ROOT)}
    first = _actor(env)
    try:
        assert _holds_lock(data / "calls.lock", first), \
            first.stderr.read() if first.stderr is not None and first.poll() is not None else ""
        second = subprocess.run([sys.executable, "-m", "actor"], env=env, cwd=ROOT, capture_output=True,
                                text=True, timeout=START_TIMEOUT_S)
        assert second.returncode == 75
        assert re.search(r"another actor \(pid \d+\) holds", second.stderr) and "calls.lock" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first one is untouched
    finally:
        assert _stop(first) == 0
    third = _actor(env)  # the kernel dropped the lock with its holder
    try:
        assert _holds_lock(data / "calls.lock", third)
    finally:
        _stop(third)


REFUND = str(ROOT / "tasks" / "refund_with_approval.toml")
REFUND_EMAIL = str(ROOT / "samples" / "refund_damaged.eml")


@pytest.mark.parametrize("restart", [pytest.param(False, id="actor-running"),
                                     pytest.param(True, id="actor-killed-after")])
def test_calls_jsonl_deleted_while_an_email_waits_for_approval(stack, fake_model, restart: bool) -> None:
    """With real processes: calls.jsonl deleted while an email waits for
    approval, then approved. Before, a restarted actor ran step 1 again, traced `ok`, with no
    warning (and a running one wrote step 2 into the deleted file). Now a running actor makes
    no call on a ledger that is not the file it opened and exits 75; the new actor reconciles
    it with the key index: step 1 is `replayed`, step 2 runs once into the new calls.jsonl,
    and the trace says what the actor found."""
    s = stack(task=REFUND).start("--model-url", fake_model("damaged").url)
    (result,) = s.inject(REFUND_EMAIL)
    assert result["outcome"] == "escalated"
    (s.data / "calls.jsonl").unlink()
    if restart:
        old = s.pid("actor")
        os.kill(old, signal.SIGKILL)
        assert wait_until(lambda: s.pid("actor") != old and
                          (s.data / "calls.lock").read_text().strip() == str(s.pid("actor")), 60)
    approved = s.airlock("approve", result["id"], "--as", "support-lead", "--by", "dana")
    assert approved.returncode == 0 and "completed" in approved.stdout, approved.stdout + approved.stderr
    assert s.trace(result["id"], "outcome")[-1]["outcome"] == "completed"
    calls = [(call["step"], call["status"]) for call in s.trace(result["id"], "call")]
    assert calls == [(1, "ok"), (1, "replayed"), (2, "ok")]  # a repeated "ok" would be a call run twice
    assert [(call["message_id"], call["step"]) for call in s.calls()] == [(result["id"], 2)]
    (found,) = s.trace(event="worker.ledger_replaced")
    assert found["found_bytes"] == 0 and found["indexed_bytes"] > 0
    exits = [r["exit_code"] for r in s.trace(event="service_restarted") if r["service"] == "actor"]
    assert exits == ([-9] if restart else [75])
    assert "is not the call log the key index last saw" in "".join(s.output)
