"""A real stack whose trace is closed into many segments while its broker is killed: every
email still gets exactly one outcome, and every reader finds lines in closed segments."""

from __future__ import annotations

from collections import Counter

import msgspec

from airlock import tracefiles
from tests.conftest import ROOT
from tests.integration.conftest import wait_until
from tests.integration.test_crash import CRASH_ENV, kill
from tests.lines import json_object

SEED = str(ROOT / "samples" / "seed_4411_de.eml")


def test_broker_killed_while_the_trace_rotates_loses_and_repeats_nothing(stack, fake_model) -> None:
    """60 emails over a trace closed every 16 KB, the broker killed three times mid-stream:
    each email has one final outcome, the restarts read a checkpoint, and `airlock trace ID`
    finds an email whose lines are all in closed segments."""
    model = fake_model("4411")
    model.delay_s = 0.05
    s = stack(AIRLOCK_TRACE_SEGMENT_BYTES="16384", **CRASH_ENV).start("--model-url", model.url)
    submitted = s.airlock("inject", "--json", *[SEED] * 60)
    assert submitted.returncode == 0, submitted.stderr
    ids = [msgspec.json.decode(line)["id"] for line in submitted.stdout.splitlines()]
    for _ in range(3):
        kill(s, "broker")

    def finals() -> Counter[str]:
        return Counter(o["message_id"] for o in s.trace(event="outcome") if o["outcome"] != "escalated")

    assert wait_until(lambda: set(finals()) >= set(ids), timeout_s=120), \
        f"{len(set(ids) - set(finals()))} emails without an outcome"
    assert all(n == 1 for i, n in finals().items() if i in ids), finals()
    trace_path = s.data / "trace.jsonl"
    segments = tracefiles.closed(trace_path)
    assert len(segments) >= 5 and tracefiles.load(trace_path).through >= 1
    assert len(s.trace(event="trace_checkpoint")) >= 1
    live_ids = {r.get("message_id") for r in map(json_object, trace_path.read_bytes().splitlines()) if r}
    first = next(i for i in ids if i not in live_ids)  # all of its lines are in closed segments
    shown = s.airlock("trace", first)
    assert shown.returncode == 0 and "received" in shown.stdout and "outcome" in shown.stdout, shown.stderr
