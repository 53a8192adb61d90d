"""The baseline: the same handle() functions chained in one process.

Read -> Reader.handle -> Reading -> Validator.handle -> Passed -> Actor.handle -> Done,
with the reader answering from the same recordings (no model), the actor's real executor,
mock tools and fsynced call log on a scratch data dir. No ZeroMQ, no broker, no journal, no
trace: what is left is the work itself, which is what the separated run is compared with.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from actor import app as actor_app
from airlock import settings as settings_module, task as task_module, trace
from airlock.wire import Done, Message, Passed, Read, Reading, Rejected, Unreadable
from bench import CALLS_PER_EMAIL
from bench.report import percentiles
from reader import app as reader_app
from validator.app import Validator

Progress = Callable[[int, int], None]


class Chain:
    """Each message to the service whose role receives it, until an outcome."""

    def __init__(self, data_dir: Path, task_path: Path) -> None:
        # A mapping, not os.environ: no AIRLOCK_MODEL_URL may sneak a model in.
        settings = settings_module.load({"AIRLOCK_DATA_DIR": str(data_dir), "AIRLOCK_TASK": str(task_path)})
        task = task_module.load(task_path)
        self.reader = reader_app.build(settings, task)
        self.validator = Validator(task.value)
        self.actor = actor_app.build(settings, task)
        self.calls_path = settings.calls_path

    def run(self, email: Read, sender: str) -> str:
        pending: list[Message] = [email]
        while pending:
            match pending.pop():
                case Read() as message:
                    pending += self.reader.handle(message)
                case Reading() as message:
                    pending += self.validator.handle(message)
                case Passed() as message:  # the broker adds the sender the intake vouched for
                    pending += self.actor.handle(msgspec.structs.replace(message, sender=sender))
                case Done(outcome=outcome):
                    return outcome
                case Rejected() | Unreadable():
                    return "rejected"
        return "no outcome"

    def close(self) -> None:
        self.actor.close()


def run(data_dir: Path, task_path: Path, raw: bytes, sender: str, count: int, progress: Progress) -> dict[str, Any]:
    chain = Chain(data_dir, task_path)
    outcomes: collections.Counter[str] = collections.Counter()
    latencies = []
    progress(0, count)
    try:
        cpu_before, started = time.process_time(), time.perf_counter()
        for n in range(count):
            begun = time.perf_counter()
            outcomes[chain.run(Read(message_id=f"baseline-{n}", raw=raw, format="eml"), sender)] += 1
            latencies.append((time.perf_counter() - begun) * 1000)
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_before
    finally:
        chain.close()
    progress(count, count)
    calls_lines = sum(1 for _ in trace.read_calls(chain.calls_path))  # its call lines, not the intents
    return {
        "emails": count, "wall_s": round(wall_s, 3), "emails_per_s": round(count / wall_s, 1),
        "latency_ms": percentiles(latencies), "cpu_s_per_1000": round(cpu_s / count * 1000, 4),
        "correctness": {"completed": outcomes.pop("completed", 0), "other_outcomes": dict(outcomes),
                        "calls_lines": calls_lines, "calls_expected": CALLS_PER_EMAIL * count},
    }
