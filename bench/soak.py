"""`airlock bench --soak MINUTES`: the real stack at a steady rate for a long time.

One thread submits what is due at the asked rate (the broker's queue bound pushes back if
the stack cannot keep up; the rate it managed is reported), another awaits every outcome
on a second connection, and the main thread samples every SAMPLE_S: each process's
resident memory (VmRSS, from /proc, for each pid `airlock up` wrote to <data-dir>/run/) and
the bytes of every file family in the data dir (trace, journal, calls, and whatever index
or segment a version adds: a family is a top-level file's leading name, or a folder).
When the time is up it stops submitting, waits for the outcomes still due, stops the
stack, and times a restart on the same data dir: until `airlock up` says it is up, and
until a new email has its outcome. growth.py turns the samples into figures.
"""

from __future__ import annotations

import collections
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airlock.client import IntakeClient
from airlock.errors import AirlockError
from airlock.wire import Email
from bench import TASK, growth
from bench.pipeline import CLIENT_TIMEOUT_S, STALL_S, accepted_chunks
from harness.attack import PrivateStack

DEFAULT_RATE = 200.0  # emails/s: a steady load, well under what this machine's stack moves
SAMPLE_S = 5.0
TICK_S = 0.1  # the submitter sends what is due this often
MAX_BATCH = 500  # emails per submit call: one client window
NOT_MEASURED = ("keys", "run")  # a data dir's folders that hold no email data
FAMILY = re.compile(r"[A-Za-z_]+")
Say = Callable[[str], None]


def run(data_dir: Path, email: Email, minutes: float, rate: float, readers: int, sample_s: float,
        warmup_s: float, say: Say) -> dict[str, Any]:
    say(f"soak: airlock up with {readers} reader(s), {minutes:g} min at {rate:g} emails/s, "
        f"a sample every {sample_s:g} s")
    stack = PrivateStack(data_dir, TASK, None, readers)
    settings = stack.__enter__()
    try:
        samples, outcomes, restarted = drive(settings, email, minutes * 60, rate, sample_s, say)
    finally:
        stopping = time.perf_counter()
        stack.__exit__()
        stop_s = time.perf_counter() - stopping
    figures = growth.summary(samples, warmup_s, rate)
    figures.update(minutes=minutes, readers=readers, outcomes=dict(outcomes), restarted=restarted)
    say("soak: restarting the stack on the same data dir")
    figures["restart"] = {"stop_s": round(stop_s, 3), **restart(data_dir, email, readers)}
    return figures


def drive(settings: Any, email: Email, duration_s: float, rate: float, sample_s: float,
          say: Say) -> tuple[list[growth.Sample], collections.Counter[str], list[str]]:
    """Submit at `rate` for `duration_s`, sampling every `sample_s`; then drain."""
    stop = threading.Event()
    ids: queue.Queue[str | None] = queue.Queue()
    counts = {"accepted": 0, "done": 0}
    outcomes: collections.Counter[str] = collections.Counter()
    failures: list[BaseException] = []

    def submit() -> None:
        try:
            with IntakeClient(settings, timeout_s=CLIENT_TIMEOUT_S) as client:
                started, sent = time.monotonic(), 0
                while not stop.is_set():
                    due = min(MAX_BATCH, int(rate * (time.monotonic() - started)) - sent)
                    if due <= 0:
                        stop.wait(TICK_S)
                        continue
                    for _, message_id in client.submit([email] * due):
                        ids.put(message_id)
                        counts["accepted"] += 1
                    sent += due
        except BaseException as exc:  # noqa: BLE001  reported by the main thread, never lost with this one
            failures.append(exc)
        finally:
            ids.put(None)

    def await_outcomes() -> None:
        try:
            with IntakeClient(settings, timeout_s=CLIENT_TIMEOUT_S) as client:
                for chunk in accepted_chunks(ids):
                    missing = set(chunk)
                    while missing:
                        arrived = 0
                        for result in client.outcomes(list(missing), STALL_S):
                            missing.discard(result.message_id)
                            outcomes[result.outcome] += 1
                            counts["done"] += 1
                            arrived += 1
                        if not arrived:
                            raise AirlockError(f"no outcome for {STALL_S:g} s while {len(missing)} were due")
        except BaseException as exc:  # noqa: BLE001  reported by the main thread, never lost with this one
            failures.append(exc)

    pids = _pids(settings.data_dir / "run")
    threads = [threading.Thread(target=submit, name="soak-submit", daemon=True),
               threading.Thread(target=await_outcomes, name="soak-await", daemon=True)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    samples: list[growth.Sample] = []
    while not failures:
        elapsed = time.monotonic() - started
        samples.append(_sample(settings.data_dir, elapsed, counts))
        if elapsed >= duration_s:
            break
        if len(samples) % max(1, round(60 / sample_s)) == 0:
            say(f"soak: {elapsed / 60:.1f} of {duration_s / 60:g} min, {counts['done']:,} emails done")
        time.sleep(max(0.0, min(sample_s * len(samples), duration_s) - (time.monotonic() - started)))
    stop.set()
    for thread in threads:
        thread.join(STALL_S + CLIENT_TIMEOUT_S)
    if failures:
        raise AirlockError(f"the soak stopped after {counts['done']:,} emails: {failures[0]}")
    samples.append(_sample(settings.data_dir, time.monotonic() - started, counts))  # drained
    now = _pids(settings.data_dir / "run")
    return samples, outcomes, sorted(name for name, pid in pids.items() if now.get(name) != pid)


def restart(data_dir: Path, email: Email, readers: int) -> dict[str, float | int]:
    """Start the stack again on `data_dir`: seconds until it is up and until a new email
    has its outcome, with the trace bytes it had to start from."""
    trace_bytes = file_bytes(data_dir).get("trace", 0)
    began = time.perf_counter()
    with PrivateStack(data_dir, TASK, None, readers) as settings:
        up_s = time.perf_counter() - began
        with IntakeClient(settings, timeout_s=CLIENT_TIMEOUT_S) as client:
            [(_, message_id)] = list(client.submit([email]))
            if not list(client.outcomes([message_id], STALL_S)):
                raise AirlockError(f"no outcome within {STALL_S:g} s after the restart")
        first_s = time.perf_counter() - began
    return {"up_s": round(up_s, 3), "first_outcome_s": round(first_s, 3), "trace_bytes": trace_bytes}


def _sample(data_dir: Path, elapsed_s: float, counts: dict[str, int]) -> growth.Sample:
    return {"t_s": round(elapsed_s, 2), "accepted": counts["accepted"], "done": counts["done"],
            "rss_mib": rss_mib(_pids(data_dir / "run")), "files": file_bytes(data_dir)}


def _pids(run_dir: Path) -> dict[str, int]:
    """Each process `airlock up` runs, by its pid file's name (up.pid is the supervisor)."""
    found = {}
    for path in sorted(run_dir.glob("*.pid")):
        try:
            found["supervisor" if path.stem == "up" else path.stem] = int(path.read_text())
        except (OSError, ValueError):  # a child being restarted: its file is being replaced
            continue
    return found


def rss_mib(pids: dict[str, int]) -> dict[str, float]:
    """VmRSS of each live process, in MiB."""
    found = {}
    for name, pid in pids.items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                found[name] = round(int(line.split()[1]) / 1024, 2)  # kB
    return found


def file_bytes(data_dir: Path) -> dict[str, int]:
    """Bytes on disk per file family: a top-level file's leading name (trace.jsonl and any
    trace segment are "trace"), or a top-level folder; keys and pid files left out."""
    families: collections.Counter[str] = collections.Counter()
    for path in data_dir.rglob("*"):
        parts = path.relative_to(data_dir).parts
        if parts[0] in NOT_MEASURED:
            continue
        try:
            if not path.is_file():
                continue
            size = path.stat().st_size
        except OSError:  # rotated or compacted away while we looked
            continue
        leading = FAMILY.match(parts[0])
        families[parts[0] if len(parts) > 1 or leading is None else leading[0]] += size
    return dict(families)
