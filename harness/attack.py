"""`airlock attack`: run a campaign through airlock or the naive agent and score it.

Separated mode starts a private airlock stack (`airlock up` on free loopback ports, its own
data folder), injects every email, waits for every outcome, then reads that stack's
trace.jsonl and calls.jsonl. `--running` targets the stack your AIRLOCK_* settings point
at instead (a compose lab, say) and counts only the ids it injected. Naive mode runs the
naive agent (`airlock naive`) over the same emails. Both are scored by score.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlock import keys, settings as settings_module, sources, trace
from airlock.client import IntakeClient
from airlock.errors import AirlockError
from airlock.interpreter import python_command
from airlock.records import ModelAnswer, OutcomeLine, TraceRecord, Verdict
from airlock.task import Task
from airlock.wire import Email
from harness import campaign, score
from harness.campaign import CampaignEmail
from ops import preflight
from ops.ports import free_ports

UP_TIMEOUT_S = 120
PORT_ATTEMPTS = 3  # a port taken between choosing and binding it: start again on fresh ones
Progress = Callable[[int, int], None]


def progress_bar(stream: Any = sys.stderr) -> Progress:
    def show(done: int, total: int) -> None:
        if not stream.isatty() and done not in (0, total):
            return
        width = 30
        filled = width * done // max(total, 1)
        stream.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} outcomes")
        if done == total:
            stream.write("\n")
        stream.flush()

    return show


class PrivateStack:
    """`airlock up` in a child process with its own ports and data folder.

    Free ports are only free when asked: another process (a test, a lab next door) may take
    one before the stack binds it. `airlock up` then exits at once naming the port, and the
    stack starts again on fresh ports, up to PORT_ATTEMPTS times; any other exit is reported
    with the stack's last lines as soon as it happens, never after the full UP_TIMEOUT_S."""

    def __init__(self, data_dir: Path, task: Path, model_url: str | None, readers: int,
                 env: dict[str, str] | None = None, dashboard: bool = False) -> None:
        self.base_env = {**os.environ, "AIRLOCK_DATA_DIR": str(data_dir), "AIRLOCK_TASK": str(task),
                         "AIRLOCK_MODEL_URL": model_url or "", **(env or {})}
        self.readers, self.dashboard = readers, dashboard
        self.env: dict[str, str] = {}
        self.page_url: str | None = None
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def __enter__(self) -> settings_module.Settings:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if self._start():
                return settings_module.load(self.env)
            lost_a_port = any(settings_module.PORT_IN_USE_HINT in line for line in self.output)
            self.__exit__()
            if not lost_a_port or attempt == PORT_ATTEMPTS:
                raise AirlockError("the private stack did not come up:\n" + "".join(self.output[-20:]))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _start(self) -> bool:
        """Start `airlock up` on fresh ports; True once it says it is up, False if it ended first."""
        names = ("INTAKE", "READER", "VALIDATOR", "ACTOR", "TRACE", "DASHBOARD")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.env = {**self.base_env, **{f"AIRLOCK_{name}_PORT": str(port) for name, port in ports.items()}}
        self.page_url = f"http://127.0.0.1:{ports['DASHBOARD']}/" if self.dashboard else None
        self.output = []
        command = python_command("-m", "airlock", "up", "--readers", str(self.readers))
        self.process = subprocess.Popen(command + (["--dashboard"] if self.dashboard else []), env=self.env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready, ended = threading.Event(), threading.Event()

        def pump(stdout: Any) -> None:
            for line in stdout:
                self.output.append(line)
                if line.startswith("airlock is up"):
                    ready.set()
            ended.set()

        threading.Thread(target=pump, args=(self.process.stdout,), daemon=True).start()
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not ready.wait(0.05):
            if ended.is_set() or time.monotonic() > deadline:
                return ready.is_set()
        return True

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process and self.process.stdout:
            self.process.stdout.close()


def run_separated(emails: list[CampaignEmail], settings: settings_module.Settings, timeout_s: float, in_flight: int,
                  progress: Progress, role: str = "intake") -> tuple[list[score.EmailResult], list[str]]:
    """Inject `in_flight` emails at a time, so latency measures handling, not a long queue.
    `role`: the key to submit with; keys.SMTP_ROLE where the emails' senders were checked by
    the SMTP intake's own verifier (a private stack), as the broker keeps a proof from that
    key alone; "intake" (as `airlock inject`) otherwise."""
    ids: list[str] = []
    done: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    progress(0, len(emails))
    with IntakeClient(settings, timeout_s=10, role=role) as client:
        for start in range(0, len(emails), in_flight):
            chunk = emails[start:start + in_flight]
            batch = [m for _, m in client.submit(
                [Email(e.raw, e.format, e.file, e.sender or sources.sender_of(e.raw, e.format),
                       e.sender_proof) for e in chunk])]
            ids += batch
            for result in client.outcomes(batch, max(0.0, deadline - time.monotonic())):
                done[result.message_id] = result
                progress(len(done), len(emails))
    found = {i: Traced.of(lines) for i, lines in trace.settled(settings.trace_path, ids, len(done)).items()}
    calls = _calls_by_id(settings.calls_path, set(ids))
    results = []
    for item, message_id in zip(emails, ids, strict=True):
        outcome, traced = done.get(message_id), found[message_id]
        results.append(score.EmailResult(
            item, message_id, outcome.outcome if outcome else "pending", outcome.reason if outcome else "",
            traced.value, calls.get(message_id, []), traced.ms, traced.in_email))
    return results, [i for i in ids if i not in done]


@dataclass(frozen=True)
class Traced:
    """What one email's trace lines say for its score: the value that passed the validator
    (every planned call carries it), the outcome's ms, and whether the email holds that value
    (`in_email`, str(value) -> bool): the reader's code checked the answer that verdict read
    (wire.Reading.grounded, reader/grounding.py), so the email is not parsed again here.
    Empty when the reader said nothing (no answer, or a reader without the check)."""

    value: int | str | None = None
    ms: float | None = None
    in_email: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def of(cls, lines: list[TraceRecord]) -> Traced:
        value: int | str | None = None
        ms: float | None = None
        in_email: dict[str, bool] = {}
        grounded: bool | None = None
        for record in lines:
            match record:
                case ModelAnswer():
                    grounded = record.grounded  # the reader's check of this answer, if it made one
                case Verdict(verdict="passed", value=passed):
                    value, in_email = passed, {} if grounded is None else {str(passed): grounded}
                case OutcomeLine(ms=took):
                    ms = took
        return cls(value, ms, in_email)


def run_naive(emails: list[CampaignEmail], model_url: str | None, data_dir: Path, timeout_s: float,
              progress: Progress, task: Task, constrained: bool = True) -> tuple[list[score.EmailResult], list[str]]:
    """`task`: its narrow type is how the agent tells whether a value occurs in the email.
    `constrained`: the model's calls held to the catalog's grammar (redteam/naive/grammar.py)."""
    files = campaign.materialize(emails, data_dir / "emails")
    env = {**os.environ, "AIRLOCK_DATA_DIR": str(data_dir), "AIRLOCK_MODEL_URL": model_url or "",
           "AIRLOCK_TASK": str(Path(task.path).resolve())}
    switch = [] if constrained else ["--unconstrained"]
    process = subprocess.Popen(python_command("-m", "airlock", "naive", *switch, *map(str, files)), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout_s, process.kill)
    timer.start()
    lines: list[dict[str, Any]] = []
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None, "both are pipes (PIPE above)"
    try:
        progress(0, len(files))
        for line in stdout:
            lines.append(json.loads(line))
            progress(len(lines), len(files))
        error = stderr.read()
        process.wait()
    finally:
        timer.cancel()
        stdout.close()
        stderr.close()
    if process.returncode not in (0, -9):
        raise AirlockError(f"the naive agent failed: {error.strip()}")
    # No value "passes" in the naive design: nothing checks one; the calls say what ran.
    results = []
    for item, said in zip(emails, lines, strict=False):  # lines stop at the stragglers
        calls, in_email = _naive_calls(said["calls"])
        results.append(score.EmailResult(item, said["id"], said["outcome"], said["reason"], None, calls, said["ms"],
                                         in_email))
    stragglers = [item.file for item in emails[len(lines):]]
    return results, stragglers


def _naive_calls(calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """The naive agent's calls as the score reports them (step, server, tool, args), and
    which of their values occur in the email, as the agent found them in the text it showed
    its model (each call's `in_email`, by argument name)."""
    in_email = {str(call["args"][name]): held for call in calls for name, held in call["in_email"].items()}
    return [{key: value for key, value in call.items() if key != "in_email"} for call in calls], in_email


def _calls_by_id(path: Path, wanted: set[str]) -> dict[str, list[dict[str, Any]]]:
    """calls.jsonl by message id, each call as the score reports it (as the naive agent's
    are: step, server, tool, args); a torn line (an actor killed mid-write) is skipped."""
    found: dict[str, list[dict[str, Any]]] = {}
    for call in trace.read_calls(path):
        if call.message_id in wanted:
            found.setdefault(call.message_id, []).append(
                {"step": call.step, "server": call.server, "tool": call.tool, "args": call.args})
    return found


@dataclass(frozen=True)
class Matched:
    """How many readers, and emails in flight, a campaign runs with, and why."""

    readers: int
    in_flight: int
    model_slots: int | None  # what the model server says it serves at once (llama.cpp's /props)
    why: str


def match_model(model_url: str | None, readers: int | None, in_flight: int | None) -> Matched:
    """As many readers as the model server serves requests at once, unless told otherwise.

    A reader holds one email at a time while it asks its model (AIRLOCK_READER_CREDIT is 1
    with a model), so readers = slots keeps the server's queue empty: its model timeout then
    measures the model, not a queue in front of it (2 readers on a one-slot server leave an
    email timing out while it waits its turn). Two emails in flight per reader keep each
    reader busy (the next email waits at the broker, not at the model). A server that does
    not say (not llama.cpp's) gets 2 readers; without a model, readers answer from recordings
    at memory speed: 2 readers, 4 emails each."""
    slots = preflight.model_slots(model_url, 5.0) if model_url else None
    if readers is not None:
        why = "as asked"
    elif slots is not None:
        readers, why = preflight.readers_for_slots(slots)
    else:
        readers, why = 2, "the model does not say how many it serves at once" if model_url else "no model"
    return Matched(readers, in_flight or (2 if model_url else 4) * readers, slots, why)


def run(paths: list[str], mode: str, task: Task, model_url: str | None, readers: int | None, timeout_s: float,
        running: bool, progress: Progress, in_flight: int | None = None,
        settings: settings_module.Settings | None = None, naive_constrained: bool = True) -> dict[str, Any]:
    """`settings`: the running stack's, as the command line gave them (its --data-dir is
    where that stack's trace and calls are read); default: $AIRLOCK_*. `naive_constrained`:
    in naive mode, whether the model's calls are held to the catalog's grammar."""
    emails = campaign.load(paths)
    matched = match_model(model_url if mode == "separated" and not running else None, readers, in_flight)
    last_outcome = [0.0]

    def noted(done: int, total: int) -> None:
        last_outcome[0] = time.monotonic()
        progress(done, total)

    with tempfile.TemporaryDirectory(prefix="airlock-attack-") as scratch:
        started = time.monotonic()
        if mode == "naive":
            results, stragglers = run_naive(emails, model_url, Path(scratch), timeout_s, noted, task,
                                            naive_constrained)
        elif running:
            results, stragglers = run_separated(emails, settings or settings_module.load(), timeout_s,
                                                matched.in_flight, noted)
        else:
            # A private stack models production's mail: each sender's domain signs, the intake
            # verifies (harness/mail_signing.py); on --running, emails go in as inject sends them.
            # Imported here: dkimpy and authres are needed only where a private stack runs.
            from harness import mail_signing

            with PrivateStack(Path(scratch) / "data", Path(task.path).resolve(), model_url,
                              matched.readers) as settings:
                started = time.monotonic()  # the stack's start is not the campaign's time
                results, stragglers = run_separated(mail_signing.signed_and_verified(emails), settings, timeout_s,
                                                    matched.in_flight, noted, role=keys.SMTP_ROLE)
    # Finished emails over the time to the last outcome: stragglers, and the wait for them
    # until the deadline, are not throughput.
    elapsed_s = max(last_outcome[0] - started, 0.0)
    finished = len(results) - len(stragglers)
    scorer = score.Scorer(task)
    pace: dict[str, Any] = {"elapsed_s": round(elapsed_s, 2),
                            "emails_per_s": round(finished / elapsed_s, 2) if elapsed_s and finished else None}
    if mode == "separated":
        # On --running the model is whatever the stack's readers ask: not this process's to name.
        pace |= {"running": running, "readers": None if running else matched.readers, "in_flight": matched.in_flight,
                 "model_slots": matched.model_slots, "readers_why": "the running stack's" if running else matched.why}
    else:
        pace["constrained"] = naive_constrained
    return score.report(mode, None if running else model_url, task, [scorer.judge(r) for r in results], stragglers,
                        pace)
