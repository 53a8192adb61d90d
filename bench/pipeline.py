"""The separated run: the real processes of `airlock up`, driven through the intake.

Throughput: one thread submits every email (IntakeClient.submit keeps a window in flight)
while the main thread awaits outcomes in chunks on a second connection, so the pipeline is
never idle for want of input. Latency: one email in flight, submit then await, timed by the
client and by the broker's own `ms` on each outcome line. CPU and peak memory come from
/proc, for each pid `airlock up` wrote to <data-dir>/run/.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from airlock import records, trace, tracefiles
from airlock.client import IntakeClient
from airlock.errors import AirlockError
from airlock.settings import Settings
from airlock.wire import Email
from bench import CALLS_PER_EMAIL
from bench.report import percentiles

STALL_S = 60.0  # no outcome at all for this long: the run is stuck, stragglers are counted
AWAIT_CHUNK = 1000  # ids per Await
TRACE_WAIT_S = 10.0  # the broker writes its trace after its answers; wait this long for it
CLIENT_TIMEOUT_S = 30.0
STAGES = (("reader", "received", "model_answer"), ("validator", "model_answer", "verdict"),
          ("actor", "verdict", "outcome"))
STAGE_EVENTS = {event for _, start, end in STAGES for event in (start, end)}
Progress = Callable[[int, int], None]


class Processes:
    """The stack's processes by their pid files: CPU seconds and peak resident memory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.pids = self._read()
        self.ticks = os.sysconf("SC_CLK_TCK")

    def _read(self) -> dict[str, int]:
        names = {"up": "supervisor"}
        return {names.get(p.stem, p.stem): int(p.read_text()) for p in sorted(self.run_dir.glob("*.pid"))}

    def cpu_s(self) -> dict[str, float]:
        """utime + stime of each process still alive (one that died is in restarted())."""
        found = {}
        for name, pid in self.pids.items():
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()  # after "pid (comm)"; comm may hold spaces
            except OSError:
                continue
            found[name] = (int(fields[11]) + int(fields[12])) / self.ticks
        return found

    def peak_rss_mb(self) -> dict[str, float]:
        found = {}
        for name, pid in self.pids.items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    found[name] = int(line.split()[1]) / 1024  # kB
        return found

    def restarted(self) -> list[str]:
        """Processes whose pid changed since we started measuring (a child died)."""
        now = self._read()
        return sorted(name for name, pid in self.pids.items() if now.get(name) != pid)


def throughput(settings: Settings, email: Email, count: int, readers: int, progress: Progress) -> dict[str, Any]:
    meter = Processes(settings.data_dir / "run")
    ids: queue.Queue[str | None] = queue.Queue()
    failures: list[BaseException] = []

    def submit() -> None:
        try:
            with IntakeClient(settings, timeout_s=CLIENT_TIMEOUT_S) as client:
                for _, message_id in client.submit([email] * count):
                    ids.put(message_id)
        except BaseException as exc:  # noqa: BLE001  reported below, never lost with the thread
            failures.append(exc)
        finally:
            ids.put(None)

    trace_before = trace_size(settings.trace_path)
    cpu_before, client_before = meter.cpu_s(), time.process_time()
    submitter = threading.Thread(target=submit, name="bench-submit", daemon=True)
    started = last = time.perf_counter()
    submitter.start()
    submitted: list[str] = []
    results: dict[str, str] = {}
    stalled = False
    progress(0, count)
    with IntakeClient(settings, timeout_s=CLIENT_TIMEOUT_S) as client:
        for chunk in accepted_chunks(ids):
            submitted += chunk
            if not stalled:
                stalled = not _await(client, chunk, results, lambda: progress(len(results), count))
                last = time.perf_counter()
    submitter.join()
    cpu_after, client_after = meter.cpu_s(), time.process_time()
    if failures:
        raise AirlockError(f"submitting failed after {len(submitted)} of {count}: {failures[0]}")
    wall_s = last - started
    facts = trace_facts(settings.trace_path, submitted, len(results))
    (bytes_after, lines_after), (bytes_before, lines_before) = trace_size(settings.trace_path), trace_before
    trace_bytes, trace_lines = bytes_after - bytes_before, lines_after - lines_before
    rss = meter.peak_rss_mb()
    processes = {name: _process(cpu_after[name] - cpu_before[name] if name in cpu_after else None,
                                rss.get(name), count, wall_s) for name in meter.pids}
    processes["bench client"] = _process(client_after - client_before, None, count, wall_s)
    outcomes = collections.Counter(results.values())
    cpu_total = sum(proc["cpu_s"] or 0.0 for proc in processes.values())
    return {
        "emails": count, "readers": readers, "wall_s": round(wall_s, 3),
        "emails_per_s": round(len(results) / wall_s, 1) if wall_s > 0 else None,
        # What the CPUs allow: every process's CPU per email, all of them busy all the time.
        "cpu_s_per_1000_total": round(cpu_total / count * 1000, 4),
        "cpu_bound_emails_per_s": round(len(os.sched_getaffinity(0)) * count / cpu_total, 1) if cpu_total else None,
        "latency_ms": percentiles([f["ms"] for f in facts.values() if "ms" in f]),
        "stages_ms": stages_ms(facts),
        # What the trace costs on disk: every line of the run (its emails', and the few others').
        "trace_bytes_per_email": round(trace_bytes / count, 1),
        "trace_lines_per_email": round(trace_lines / count, 2),
        "processes": processes,
        "services": _services(processes),
        "correctness": {
            "submitted": len(submitted), "outcomes": len(results), "completed": outcomes.pop("completed", 0),
            "other_outcomes": dict(outcomes), "missing": count - len(results), "stalled": stalled,
            "trace_outcome_lines": sum(f.get("outcome_lines", 0) for f in facts.values()),
            "calls_lines": _lines(settings.calls_path), "calls_expected": CALLS_PER_EMAIL * count,
            "restarted": meter.restarted(),
        },
    }


def accepted_chunks(ids: queue.Queue[str | None]) -> Iterator[list[str]]:
    """Ids as they are accepted, up to AWAIT_CHUNK at a time; waits for at least one."""
    while True:
        first = ids.get()
        if first is None:
            return
        chunk = [first]
        while len(chunk) < AWAIT_CHUNK:
            try:
                more = ids.get_nowait()
            except queue.Empty:
                break
            if more is None:
                yield chunk
                return
            chunk.append(more)
        yield chunk


def _await(client: IntakeClient, ids: list[str], results: dict[str, str], tick: Callable[[], None]) -> bool:
    """Collect outcomes for `ids`; False if none arrived for STALL_S while some were missing."""
    missing = ids
    while missing:
        arrived = 0
        for result in client.outcomes(missing, STALL_S):
            results[result.message_id] = result.outcome
            arrived += 1
        tick()
        if not arrived:
            return False
        missing = [message_id for message_id in missing if message_id not in results]
    return True


def _process(cpu_s: float | None, rss_mb: float | None, count: int, wall_s: float) -> dict[str, float | None]:
    """`busy_pct`: CPU time over the run's wall time; near 100 is a process that is the limit.
    None where the process died during the run (it is listed in correctness.restarted)."""
    if cpu_s is None:
        return {"cpu_s": None, "cpu_s_per_1000": None, "busy_pct": None, "peak_rss_mb": None}
    return {"cpu_s": round(cpu_s, 3), "cpu_s_per_1000": round(cpu_s / count * 1000, 4),
            "busy_pct": round(100 * cpu_s / wall_s, 1) if wall_s > 0 else None,
            "peak_rss_mb": round(rss_mb, 1) if rss_mb is not None else None}


def _services(processes: dict[str, dict[str, float | None]]) -> dict[str, dict[str, float | int | None]]:
    """Per service: CPU summed over its processes (all readers); the busiest, the largest peak RSS."""
    services: dict[str, dict[str, Any]] = {}
    for name, proc in processes.items():
        role = name.split("-", 1)[0] if name.startswith("reader-") else name
        into = services.setdefault(role, {"processes": 0, "cpu_s": 0.0, "cpu_s_per_1000": 0.0, "busy_pct": None,
                                          "peak_rss_mb": None})
        into["processes"] += 1
        into["cpu_s"] = round(into["cpu_s"] + (proc["cpu_s"] or 0.0), 3)
        into["cpu_s_per_1000"] = round(into["cpu_s_per_1000"] + (proc["cpu_s_per_1000"] or 0.0), 4)
        if proc["busy_pct"] is not None:
            into["busy_pct"] = max(into["busy_pct"] or 0.0, proc["busy_pct"])
        if proc["peak_rss_mb"] is not None:
            into["peak_rss_mb"] = max(into["peak_rss_mb"] or 0.0, proc["peak_rss_mb"])
    return services


def one_at_a_time(settings: Settings, email: Email, count: int,
                  progress: Progress) -> tuple[list[str], list[float], collections.Counter[str]]:
    """Submit, await its outcome, then the next: (ids, client round trips in ms, outcomes)."""
    ids: list[str] = []
    round_trips: list[float] = []
    outcomes: collections.Counter[str] = collections.Counter()
    progress(0, count)
    with IntakeClient(settings, timeout_s=CLIENT_TIMEOUT_S) as client:
        for done in range(count):
            started = time.perf_counter()
            [(_, message_id)] = client.submit([email])
            results = list(client.outcomes([message_id], STALL_S))
            round_trips.append((time.perf_counter() - started) * 1000)
            ids.append(message_id)
            outcomes[results[0].outcome if results else "missing"] += 1
            progress(done + 1, count)
    return ids, round_trips, outcomes


def low_rate(settings: Settings, email: Email, count: int, progress: Progress) -> dict[str, Any]:
    ids, round_trips, outcomes = one_at_a_time(settings, email, count, progress)
    facts = trace_facts(settings.trace_path, ids, count - outcomes["missing"])
    return {"emails": count, "outcomes": dict(outcomes), "round_trip_ms": percentiles(round_trips),
            "trace_ms": percentiles([f["ms"] for f in facts.values() if "ms" in f]), "stages_ms": stages_ms(facts)}


def with_model(settings: Settings, email: Email, count: int, progress: Progress) -> dict[str, Any]:
    """Airlock's share of each email's time: 1 - model ms / total ms, over model answers."""
    ids, round_trips, outcomes = one_at_a_time(settings, email, count, progress)
    facts = trace_facts(settings.trace_path, ids, count - outcomes["missing"])
    answered = [(total, facts[i]["model_ms"]) for i, total in zip(ids, round_trips, strict=True)
                if "model_ms" in facts[i]]
    total_ms = sum(total for total, _ in answered)
    model_ms = sum(model for _, model in answered)
    mean = (lambda value: round(value / len(answered), 3)) if answered else (lambda value: None)
    return {
        "model_url": settings.model_url, "emails": count, "outcomes": dict(outcomes),
        "sources": dict(collections.Counter(f.get("source", "unknown") for f in facts.values())),
        "model_answers": len(answered), "total_ms_mean": mean(total_ms), "model_ms_mean": mean(model_ms),
        "airlock_ms_mean": mean(total_ms - model_ms),
        "airlock_ms": percentiles([total - model for total, model in answered]),  # per email, outside the model
        "airlock_share_pct": round(100 * (1 - model_ms / total_ms), 3) if total_ms else None,
        "trace_ms_mean": percentiles([f["ms"] for f in facts.values() if "ms" in f])["mean"],
        "round_trip_ms": percentiles(round_trips),
    }


def trace_facts(path: Path, ids: list[str], expected: int) -> dict[str, dict[str, Any]]:
    """Per id: outcome `ms`, the number of outcome lines, and the model answer's source and
    `model_ms`, once `expected` ids have an outcome line (see trace.settled)."""
    facts: dict[str, dict[str, Any]] = {}
    for message_id, kept in trace.settled(path, ids, expected, TRACE_WAIT_S).items():
        found = facts[message_id] = {}
        for record in kept:
            event = trace.event_of(record)
            if event in STAGE_EVENTS and isinstance(record, records.Record):
                found.setdefault(f"at.{event}", record.at)  # the first: a redelivery comes later
            if isinstance(record, records.OutcomeLine):
                found["outcome_lines"] = found.get("outcome_lines", 0) + 1
                found["ms"] = record.ms
            elif isinstance(record, records.ModelAnswer):
                found["source"] = record.source
                if isinstance(record.model_ms, (int, float)):
                    found["model_ms"] = record.model_ms
    return facts


def stages_ms(facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Where each email's time went, from the broker's timestamps: `reader` is received to
    the reader's answer (queueing for a reader included), `validator` to the verdict,
    `actor` to the outcome."""
    spans: dict[str, list[float]] = {stage: [] for stage, _, _ in STAGES}
    for found in facts.values():
        for stage, start, end in STAGES:
            if f"at.{start}" in found and f"at.{end}" in found:
                spans[stage].append((_instant(found[f"at.{end}"]) - _instant(found[f"at.{start}"])) * 1000)
    return {stage: percentiles(values) for stage, values in spans.items()}


def _instant(at: str) -> float:
    return datetime.fromisoformat(at).timestamp()


def trace_size(path: Path) -> tuple[int, int]:
    """(bytes, lines) of the whole trace: every closed segment and the live file."""
    size = lines = 0
    for raw in tracefiles.lines(path):
        size += len(raw)
        lines += 1
    return size, lines


def _lines(path: Path) -> int:
    """The calls recorded in `path` (a calls.jsonl): its `call` lines, not the intents before them."""
    return sum(1 for _ in trace.read_calls(path)) if path.exists() else 0
