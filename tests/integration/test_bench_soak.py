"""`airlock bench --soak` for a few seconds: the report's shape, every figure there. Speed is never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PROCESSES = {"supervisor", "broker", "reader-1", "validator", "actor"}


def test_a_short_soak_reports_memory_files_and_restart(tmp_path: Path) -> None:
    """Six seconds at 50 emails/s: RSS per process (after warm-up, peak, last, slope), file
    growth per 1,000 emails for trace, journal and calls, and a timed restart."""
    out = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "bench", "--soak", "0.1", "--rate", "50", "--sample-s", "1",
                           "--warmup-s", "2", "--json", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    soak = json.loads(out.read_text())["soak"]
    assert soak["done"] == soak["accepted"] > 0 and soak["outcomes"] == {"completed": soak["done"]}
    assert soak["restarted"] == [] and soak["minutes"] == 0.1 and soak["asked_emails_per_s"] == 50
    assert soak["memory"].keys() >= PROCESSES
    for figures in soak["memory"].values():
        assert figures["peak_mib"] >= figures["last_mib"] > 0 and figures["samples"] >= 2
        assert isinstance(figures["slope_mib_per_100k"], float)
    assert {"trace", "journal", "calls"} <= soak["files"].keys()
    assert soak["files"]["trace"]["bytes_per_1000"] > 0
    samples = soak["samples"]
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples) and samples[-1]["done"] == soak["done"]
    restart = soak["restart"]
    assert restart["up_s"] > 0 and restart["first_outcome_s"] >= restart["up_s"] and restart["trace_bytes"] > 0
    assert "slope MiB / 100,000 emails" in done.stdout and "MB / 1,000 emails" in done.stdout
    assert "up again in" in done.stdout
