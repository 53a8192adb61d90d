"""`airlock bench` (python -m bench): what airlock's separation costs, measured against one process.

    pipeline.py   the real stack (`airlock up` on free ports): throughput, low-rate
                  latency, and the run through a real model endpoint
    baseline.py   the same reader, validator and actor handle() functions chained in this
                  process: no ZeroMQ, no broker, the same mock tools and call log
    report.py     percentiles, the machine, the table and the JSON

This is a separate package, not part of the kernel: the baseline imports reader, validator
and actor code into one process, which `airlock/` must never do. It reports figures only;
docs/benchmarks.md compares them with the targets.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # bench/ -> the project
TASK = ROOT / "tasks" / "order_status.toml"
# An email with a recorded answer ("4411"): with no model every email completes with 2 calls.
SAMPLE = ROOT / "samples" / "seed_4411_de.eml"
CALLS_PER_EMAIL = 2
# What `--model-url` scores the model on: hostile and benign emails with known right values.
CORPUS = ROOT / "corpus" / "handmade"
