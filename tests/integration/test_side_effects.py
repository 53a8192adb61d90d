"""A tool whose side effect is outside the ledger, and an actor killed with SIGKILL after
that effect and before its record: the replay never runs the tool again, it says `unknown`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec

from tests.conftest import ROOT, airlock_env

# The actor's own code in a child process, with one tool swapped for one that counts its own
# invocations in a file of its own (the ledger never sees that file) and, told to, then
# holds: the parent kills the child there, between the tool's effect and anything after it.
CHILD = r"""
import os, sys, threading
import msgspec
from actor.app import build
from actor.mocks import MockTools
from airlock import settings as settings_module, task as task_module
from airlock.wire import Passed

counter, hold = sys.argv[1], sys.argv[2] == "hold"

class CountingTools(MockTools):
    def run(self, tool, args, cancelled: threading.Event):
        answer = super().run(tool, args, cancelled)
        if tool.tool == "send_status":
            with open(counter, "a") as handle:  # the side effect: one line a mail sent
                handle.write("sent\n")
                handle.flush()
                os.fsync(handle.fileno())
            if hold:
                print("sent", flush=True)
                threading.Event().wait()  # killed here
        return answer

settings = settings_module.load()
actor = build(settings, task_module.load(settings.task))
actor.executor.tools = CountingTools()
answers = actor.handle(Passed(message_id="m1", value="4411"))
actor.sync()
actor.close()
print(msgspec.json.encode(answers).decode(), flush=True)
"""


def _child(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, **airlock_env(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    env["AIRLOCK_CATALOG"] = str(ROOT / "actor" / "catalog.toml")
    (tmp_path / "data").mkdir(mode=0o700, exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "sent"), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_a_step_killed_after_its_side_effect_never_runs_again(tmp_path: Path) -> None:
    """SIGKILL between the tool's effect and its record; the email's replay makes no second
    mail (the tool's own count stays 1) and reports the step `unknown`, for a person."""
    with _child(tmp_path, "hold") as first:
        assert first.stdout is not None and first.stderr is not None
        try:
            line = first.stdout.readline()
            assert line == "sent\n", (line, first.stderr.read())
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
    assert (tmp_path / "sent").read_text() == "sent\n"
    with _child(tmp_path, "go") as second:
        out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert (tmp_path / "sent").read_text() == "sent\n", "the replay ran the tool again"
    answers = msgspec.json.decode(out.splitlines()[-1])
    (done,) = [answer for answer in answers if answer.get("outcome")]
    assert [(call["step"], call["status"]) for call in done["calls"]] == [(1, "replayed"), (2, "unknown")]
    assert done["outcome"] == "failed" and "unknown" in done["reason"]
    assert [answer["detail"] for answer in answers if answer.get("event") == "call_unknown"] == [
        {"step": 2, "server": "mail", "tool": "send_status", "key": "m1:2"}]  # the trace's line for a person
    assert "a person must check" in err
