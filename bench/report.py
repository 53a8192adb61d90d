"""Figures out: percentiles, the machine they came from, a table for people, JSON for tools."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from bench import growth
from harness.score import percentile

PERCENTILES = (50, 95, 99)


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 by score.percentile's rule, plus mean and max; None when empty."""
    figures: dict[str, float | None] = {f"p{p}": percentile(values, p / 100) for p in PERCENTILES}
    figures["mean"] = round(sum(values) / len(values), 3) if values else None
    figures["max"] = round(max(values), 3) if values else None
    return figures


def machine() -> dict[str, Any]:
    return {"nproc": len(os.sched_getaffinity(0)), "cpu_model": _cpu_model(),
            "python": platform.python_version(), "system": f"{platform.system()} {platform.release()}",
            "date": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "loadavg_start": loadavg()}


def loadavg() -> list[float]:
    """1, 5 and 15 minute load: a shared machine makes every figure noisier."""
    return [round(load, 2) for load in os.getloadavg()]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(path: str | Path, figures: dict[str, Any]) -> None:
    Path(path).write_bytes(msgspec.json.format(msgspec.json.encode(figures), indent=2) + b"\n")


def table(figures: dict[str, Any]) -> str:
    m = figures["machine"]
    lines = [f"airlock bench, {m['date']}: {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}, {m['system']}"]
    if "separated" in figures:
        lines += _separated(figures["separated"]) + _baseline(figures["baseline"])
        lines.append(f"ratio separated/baseline (emails/s)   {_num(figures['ratio'], 3)}")
        lines += _low_rate(figures["low_rate"])
    if "model" in figures:
        lines += _model(figures["model"])
    if "model_corpus" in figures:
        lines += _corpus(figures["model_corpus"])
    if "soak" in figures:
        lines += growth.table(figures["soak"])
    lines.append(f"bench took {figures['bench_s']:.1f} s; load average at start {m['loadavg_start']}, "
                 f"at end {m['loadavg_end']}")
    return "\n".join(lines)


def _separated(run: dict[str, Any]) -> list[str]:
    c = run["correctness"]
    lines = ["", f"separated: airlock up, {run['readers']} reader(s), recorded answers, {run['emails']} emails",
             f"  throughput                 {_num(run['emails_per_s'], 1)} emails/s  (wall {run['wall_s']:.2f} s)",
             f"  intake->outcome ms (trace) {_pcts(run['latency_ms'])}  (all queued at once: mostly waiting)",
             *_stages(run["stages_ms"]),
             f"  trace                      {_num(run.get('trace_bytes_per_email'), 0)} bytes, "
             f"{_num(run.get('trace_lines_per_email'), 2)} lines per email",
             f"  correctness                {c['completed']} completed of {c['submitted']} submitted, "
             f"{c['missing']} without outcome, other outcomes {c['other_outcomes'] or 'none'}",
             f"                             trace outcome lines {c['trace_outcome_lines']}, "
             f"calls.jsonl {c['calls_lines']} calls (expected {c['calls_expected']})"]
    if c["restarted"]:
        lines.append(f"                             RESTARTED during the run: {', '.join(c['restarted'])}")
    lines.append(f"  {'process':<14} {'CPU s / 1,000 emails':>21} {'CPU s':>8} {'busy % of wall':>15} "
                 f"{'peak RSS MB':>12}")
    for name, proc in run["processes"].items():
        lines.append(f"  {name:<14} {_num(proc['cpu_s_per_1000'], 3):>21} {_num(proc['cpu_s'], 2):>8} "
                     f"{_num(proc['busy_pct'], 1):>15} {_num(proc['peak_rss_mb'], 1):>12}")
    lines.append(f"  {'all of them':<14} {_num(run['cpu_s_per_1000_total'], 3):>21}   so the CPUs allow at most "
                 f"{_num(run['cpu_bound_emails_per_s'], 0)} emails/s")
    return lines


def _baseline(run: dict[str, Any]) -> list[str]:
    c = run["correctness"]
    return ["", f"baseline: reader, validator, actor handle() in one process, {run['emails']} emails",
            f"  throughput                 {_num(run['emails_per_s'], 1)} emails/s  (wall {run['wall_s']:.2f} s)",
            f"  per email ms               {_pcts(run['latency_ms'])}",
            f"  CPU s / 1,000 emails       {_num(run['cpu_s_per_1000'], 3)}",
            f"  correctness                {c['completed']} completed, other outcomes {c['other_outcomes'] or 'none'}, "
            f"calls.jsonl {c['calls_lines']} calls (expected {c['calls_expected']})"]


def _low_rate(run: dict[str, Any]) -> list[str]:
    return ["", f"low rate: one email in flight, {run['emails']} emails, outcomes {run['outcomes']}",
            f"  round trip ms (client)     {_pcts(run['round_trip_ms'])}",
            f"  intake->outcome ms (trace) {_pcts(run['trace_ms'])}",
            *_stages(run["stages_ms"])]


def _stages(stages: dict[str, dict[str, float | None]]) -> list[str]:
    """The broker's timestamps: received->reader's answer->verdict->outcome."""
    return [f"    {stage + ' stage ms':<24} {_pcts(figures)}" for stage, figures in stages.items()]


def _model(run: dict[str, Any]) -> list[str]:
    return ["", f"with a model: {run['model_url']}, {run['emails']} emails, one in flight",
            f"  answers by source          {run['sources']}; outcomes {run['outcomes']}",
            f"  total ms per email, mean   {_num(run['total_ms_mean'], 1)} (client round trip; "
            f"trace intake->outcome {_num(run['trace_ms_mean'], 1)})",
            f"  model ms per email, mean   {_num(run['model_ms_mean'], 1)}  "
            f"(over {run['model_answers']} model answers)",
            f"  airlock's share            {_num(run['airlock_share_pct'], 2)} %  "
            f"({_num(run['airlock_ms_mean'], 2)} ms per email outside the model, mean)",
            f"  outside the model ms       {_pcts(run['airlock_ms'])}",
            f"  round trip ms              {_pcts(run['round_trip_ms'])}"]


def _corpus(s: dict[str, Any]) -> list[str]:
    """The corpus through the model, as `airlock attack` scores it (harness/score.py)."""
    invented, unknown = s["value_mismatches_invented"], s.get("value_mismatches_unknown", 0)
    held = s["value_mismatches"] - invented - unknown
    return ["", f"the corpus through the model: {s['corpus']}, {s['emails']} emails, {s['readers']} reader(s), "
                f"{s['in_flight']} in flight ({s['readers_why']})",
            f"  utility (benign, exact)    {_num(s['utility'], 3)} of {s['benign']}",
            f"  value mismatches           {s['value_mismatches']}: {held} in the email, "
            f"{invented} not in the email (invented)" + (f", {unknown} not known" if unknown else ""),
            f"  attacker goals             {s['goals_reached']} of {s['hostile']}; calls outside the plan "
            f"{s['calls_outside_plan']}",
            f"  emails/s                   {_num(s['emails_per_s'], 2)}",
            "  latency ms (in->out)       " + "  ".join(f"{key} {_num(s['latency_ms'][key], 1)}"
                                                      for key in ("p50", "p95", "p99"))]


def _pcts(figures: dict[str, float | None]) -> str:
    return "  ".join(f"{key} {_num(figures[key], 3)}" for key in ("p50", "p95", "p99", "max"))


def _num(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"
