"""The soak's figures from its samples: memory per process over time and file growth per email.

A sample is what soak.py read at one instant: seconds since the start, emails accepted and
emails with an outcome so far, each process's resident memory (MiB) and each file family's
bytes on disk. Everything here is arithmetic on those, so it is tested with small numbers.

Memory is judged after warm-up (caches fill, the allocator settles): the first sample at
or past `warmup_s`, the peak, the last, and the least-squares slope of RSS against emails
done, in MiB per 100,000 emails: flat memory is a slope near 0, a leak a steady positive
one. The slope over the later half of those samples tells a cache that fills up to its
bound and stops (a late slope near 0) from a leak (the same slope throughout). Files are
judged over the whole run: bytes added per 1,000 emails with an outcome
(a rotated or compacted file grows less, or shrinks).
"""

from __future__ import annotations

from typing import Any, TypedDict

PER_EMAILS = 100_000  # the slope's unit: MiB per this many emails
PER_FILE_EMAILS = 1_000  # file growth's unit: bytes per this many emails
TIMELINE_POINTS = 6  # RSS columns the table shows, evenly spread over the run


class Sample(TypedDict):
    t_s: float
    accepted: int
    done: int
    rss_mib: dict[str, float]
    files: dict[str, int]


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y on x; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def after_warmup(samples: list[Sample], warmup_s: float) -> list[Sample]:
    """The samples from the first one at or past warm-up; the last one if none is."""
    later = [sample for sample in samples if sample["t_s"] >= warmup_s]
    return later or samples[-1:]


def memory(samples: list[Sample], warmup_s: float) -> dict[str, dict[str, float | int | None]]:
    """Per process: RSS after warm-up, peak, last, and slope in MiB per 100,000 emails."""
    settled = after_warmup(samples, warmup_s)
    names = sorted({name for sample in samples for name in sample["rss_mib"]})
    figures: dict[str, dict[str, float | int | None]] = {}
    for name in names:
        seen = [sample["rss_mib"][name] for sample in samples if name in sample["rss_mib"]]
        points = [(float(sample["done"]), sample["rss_mib"][name]) for sample in settled if name in sample["rss_mib"]]
        rate, late = slope(points), slope(points[len(points) // 2:])
        figures[name] = {
            "after_warmup_mib": round(points[0][1], 1) if points else None,
            "peak_mib": round(max(seen), 1),
            "last_mib": round(seen[-1], 1),
            "slope_mib_per_100k": round(rate * PER_EMAILS, 2) if rate is not None else None,
            "late_slope_mib_per_100k": round(late * PER_EMAILS, 2) if late is not None else None,
            "samples": len(seen),
        }
    return figures


def files(samples: list[Sample]) -> dict[str, dict[str, float | int | None]]:
    """Per file family: bytes at the start, at the end, the peak, and bytes added per
    1,000 emails with an outcome over the run (None when no email finished)."""
    first, last = samples[0], samples[-1]
    emails = last["done"] - first["done"]
    names = sorted({name for sample in samples for name in sample["files"]})
    figures: dict[str, dict[str, float | int | None]] = {}
    for name in names:
        start, end = first["files"].get(name, 0), last["files"].get(name, 0)
        figures[name] = {
            "start_bytes": start, "end_bytes": end,
            "peak_bytes": max(sample["files"].get(name, 0) for sample in samples),
            "bytes_per_1000": round((end - start) / emails * PER_FILE_EMAILS) if emails > 0 else None,
        }
    return figures


def timeline(samples: list[Sample], points: int = TIMELINE_POINTS) -> list[Sample]:
    """At most `points` samples, evenly spread, the first and the last always among them."""
    if len(samples) <= points:
        return samples
    step = (len(samples) - 1) / (points - 1)
    return [samples[round(i * step)] for i in range(points)]


def summary(samples: list[Sample], warmup_s: float, asked_rate: float) -> dict[str, Any]:
    """Every figure the soak reports, from its samples (at least one)."""
    first, last = samples[0], samples[-1]
    settled = after_warmup(samples, warmup_s)
    wall_s = last["t_s"] - first["t_s"]
    settled_s = last["t_s"] - settled[0]["t_s"]
    return {
        "asked_emails_per_s": asked_rate,
        "wall_s": round(wall_s, 1),
        "accepted": last["accepted"], "done": last["done"],
        "emails_per_s": round((last["done"] - first["done"]) / wall_s, 1) if wall_s > 0 else None,
        "emails_per_s_after_warmup": (round((last["done"] - settled[0]["done"]) / settled_s, 1)
                                      if settled_s > 0 else None),
        "warmup_s": warmup_s,
        "memory": memory(samples, warmup_s),
        "files": files(samples),
        "samples": samples,
    }


def table(soak: dict[str, Any]) -> list[str]:
    """The soak's lines for people: memory per process, its timeline, files, restart."""
    lines = ["", f"soak: {soak['minutes']:g} min asking {soak['asked_emails_per_s']:g} emails/s, "
                 f"{soak['readers']} reader(s), recorded answers: {soak['done']:,} emails with an outcome "
                 f"of {soak['accepted']:,} accepted, {_num(soak['emails_per_s'], 1)} emails/s "
                 f"({_num(soak['emails_per_s_after_warmup'], 1)} after a {soak['warmup_s']:g} s warm-up)",
             f"  outcomes {soak['outcomes'] or 'none'}" + (f"; RESTARTED during the run: {', '.join(soak['restarted'])}"
                                                         if soak["restarted"] else "")]
    lines.append(f"  {'process':<12} {'RSS MiB after warm-up':>22} {'peak':>7} {'last':>7} "
                 f"{'slope MiB / 100,000 emails':>27} {'later half':>11}")
    for name, proc in soak["memory"].items():
        lines.append(f"  {name:<12} {_num(proc['after_warmup_mib'], 1):>22} {_num(proc['peak_mib'], 1):>7} "
                     f"{_num(proc['last_mib'], 1):>7} {_num(proc['slope_mib_per_100k'], 2):>27} "
                     f"{_num(proc['late_slope_mib_per_100k'], 2):>11}")
    shown = timeline(soak["samples"])
    lines.append(f"  {'RSS MiB at':<12} " + " ".join(f"{_moment(s):>14}" for s in shown))
    for name in soak["memory"]:
        lines.append(f"  {name:<12} " + " ".join(f"{_num(s['rss_mib'].get(name), 1):>14}" for s in shown))
    lines.append(f"  {'files':<12} {'MB at start':>12} {'at end':>10} {'peak':>10} {'MB / 1,000 emails':>18}")
    for name, grew in soak["files"].items():
        lines.append(f"  {name:<12} {_mb(grew['start_bytes']):>12} {_mb(grew['end_bytes']):>10} "
                     f"{_mb(grew['peak_bytes']):>10} {_mb(grew['bytes_per_1000'], 3):>18}")
    restart = soak.get("restart")
    if restart:
        lines.append(f"  restart      stopped in {_num(restart['stop_s'], 2)} s; "
                     f"up again in {_num(restart['up_s'], 2)} s "
                     f"with {_mb(restart['trace_bytes'])} MB of trace; first outcome "
                     f"{_num(restart['first_outcome_s'], 2)} s after the start")
    return lines


def _moment(sample: Sample) -> str:
    return f"{sample['t_s']:.0f}s/{sample['done']:,}"


def _mb(value: float | int | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value / 1e6:,.{digits}f}"


def _num(value: float | None, digits: int) -> str:
    if value is None:
        return "n/a"
    return f"{value if round(value, digits) else 0.0:,.{digits}f}"  # never "-0.00"
