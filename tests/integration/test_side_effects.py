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
from tests.integration.conftest import wait_until
from tests.integration.test_crash import CRASH_ENV, SEED, kill

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


# Loaded by every process of the stack below (PYTHONPATH): in the actor, mail/send_status
# also counts its own invocations in a file the ledger never sees, and its first call then
# holds until the test kills the actor there. Nothing in airlock knows of it.
SITECUSTOMIZE = r"""
import os, threading
if os.environ.get("COUNTED_SENDS"):
    try:
        from actor import mocks
    except Exception:
        mocks = None
    if mocks is not None:
        real_run = mocks.MockTools.run

        def run(self, tool, args, cancelled):
            answer = real_run(self, tool, args, cancelled)
            if tool.tool == "send_status":
                path = os.environ["COUNTED_SENDS"]
                first = not os.path.exists(path)
                with open(path, "a") as handle:
                    handle.write("sent\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                if first:
                    threading.Event().wait(60)  # killed here, between the effect and its record
            return answer

        mocks.MockTools.run = run
"""


def test_the_actor_service_killed_after_a_mail_went_out_sends_it_once(stack, fake_model, tmp_path: Path) -> None:
    """`airlock up`, one email; the actor process is SIGKILLed after send_status's effect and
    before its record; the supervisor restarts it, the broker hands it the email again, and the
    mail is not sent twice: the email ends `failed`, its step 2 `unknown`, named for a person."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    sent = tmp_path / "sent"
    s = stack(COUNTED_SENDS=str(sent), **CRASH_ENV)
    s.env["PYTHONPATH"] = os.pathsep.join([str(hook), str(ROOT)])
    s.start("--model-url", fake_model("4411").url)
    submitted = s.airlock("inject", "--json", SEED)
    assert submitted.returncode == 0, submitted.stderr
    (message_id,) = [msgspec.json.decode(line)["id"] for line in submitted.stdout.splitlines()]
    assert wait_until(sent.exists, timeout_s=60), "send_status never ran"
    kill(s, "actor")
    assert wait_until(lambda: s.trace(message_id, event="outcome"), timeout_s=90), "no outcome"
    (outcome,) = s.trace(message_id, event="outcome")
    assert sent.read_text() == "sent\n", "the mail was sent again"
    assert outcome["outcome"] == "failed" and "unknown" in outcome["reason"], outcome
    assert [line["step"] for line in s.trace(message_id, event="worker.call_unknown")] == [2]
    assert "step 2 mail/send_status: unknown" in s.airlock("pending").stdout
