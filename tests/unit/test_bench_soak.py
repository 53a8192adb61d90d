"""The soak's figures (bench/growth.py, soak.py's measuring), from small made-up samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as bench_main, growth, soak


def sample(t_s: float, done: int, rss: dict[str, float], files: dict[str, int]) -> growth.Sample:
    return {"t_s": t_s, "accepted": done, "done": done, "rss_mib": rss, "files": files}


# A broker that leaks 1 MiB per 1,000 emails after warm-up, an actor flat after warm-up,
# a trace growing 3,000 bytes per email and a journal compacted back to where it began.
SAMPLES = [
    sample(0, 0, {"broker": 20.0, "actor": 10.0}, {"trace": 0, "journal": 0}),
    sample(10, 1000, {"broker": 30.0, "actor": 25.0}, {"trace": 3_000_000, "journal": 500_000}),
    sample(20, 2000, {"broker": 31.0, "actor": 25.0}, {"trace": 6_000_000, "journal": 900_000}),
    sample(30, 3000, {"broker": 32.0, "actor": 25.0}, {"trace": 9_000_000, "journal": 0}),
]


def test_slope_is_least_squares_and_none_without_spread() -> None:
    """The slope of y on x; None when every x is the same (nothing to fit)."""
    assert growth.slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2.0)
    assert growth.slope([(0, 0), (1, 1), (2, 0), (3, 1)]) == pytest.approx(0.2)
    assert growth.slope([(5, 1), (5, 2)]) is None
    assert growth.slope([]) is None


def test_memory_is_judged_after_warm_up() -> None:
    """Warm-up growth is left out: the leak shows as 100 MiB / 100,000 emails, the flat actor as 0."""
    memory = growth.memory(SAMPLES, warmup_s=10)
    assert memory["broker"] == {"after_warmup_mib": 30.0, "peak_mib": 32.0, "last_mib": 32.0,
                                "slope_mib_per_100k": 100.0, "late_slope_mib_per_100k": 100.0, "samples": 4}
    assert memory["actor"]["slope_mib_per_100k"] == 0.0 and memory["actor"]["after_warmup_mib"] == 25.0


def test_a_cache_that_fills_to_its_bound_has_a_flat_later_half() -> None:
    """Growth that stops (a bounded cache) shows a late slope of 0 where a leak keeps its own."""
    filled = [sample(t, t * 100, {"broker": min(40.0, 30.0 + t)}, {}) for t in range(0, 41, 2)]
    memory = growth.memory(filled, warmup_s=0)["broker"]
    slope = memory["slope_mib_per_100k"]
    assert slope is not None and slope > 0 and memory["late_slope_mib_per_100k"] == 0.0


def test_a_warm_up_past_the_run_judges_the_last_sample() -> None:
    """No sample past warm-up: the last one stands alone, with no slope to fit."""
    assert growth.after_warmup(SAMPLES, 99) == SAMPLES[-1:]
    assert growth.memory(SAMPLES, 99)["broker"]["slope_mib_per_100k"] is None


def test_a_process_missing_from_some_samples_is_judged_on_the_rest() -> None:
    """A child being restarted has no RSS for a moment: its other samples still count."""
    gap = [*SAMPLES[:2], sample(20, 2000, {"actor": 25.0}, {}), SAMPLES[3]]
    assert growth.memory(gap, 10)["broker"]["samples"] == 3


def test_file_growth_per_thousand_emails() -> None:
    """Bytes added per 1,000 emails over the run; a compacted file ends where it began."""
    files = growth.files(SAMPLES)
    assert files["trace"] == {"start_bytes": 0, "end_bytes": 9_000_000, "peak_bytes": 9_000_000,
                              "bytes_per_1000": 3_000_000}
    assert files["journal"]["bytes_per_1000"] == 0 and files["journal"]["peak_bytes"] == 900_000
    assert growth.files(SAMPLES[:1])["trace"]["bytes_per_1000"] is None  # no email done: no rate


def test_the_timeline_keeps_the_first_and_last() -> None:
    """Evenly spread, at most the points asked for, both ends always shown."""
    many = [sample(t, t, {}, {}) for t in range(100)]
    shown = growth.timeline(many, 6)
    assert len(shown) == 6 and shown[0]["t_s"] == 0 and shown[-1]["t_s"] == 99
    assert growth.timeline(SAMPLES, 6) == SAMPLES


def test_the_summary_and_table_carry_every_figure() -> None:
    """Rates, memory, files and the restart all reach the table."""
    figures = growth.summary(SAMPLES, 10, 100.0)
    assert (figures["done"], figures["emails_per_s"], figures["emails_per_s_after_warmup"]) == (3000, 100.0, 100.0)
    figures.update(minutes=0.5, readers=1, outcomes={"completed": 3000}, restarted=[],
                   restart={"stop_s": 0.5, "up_s": 1.25, "first_outcome_s": 1.5, "trace_bytes": 9_000_000})
    text = "\n".join(growth.table(figures))
    assert "3,000 emails with an outcome" in text and "100.0 emails/s" in text
    assert "broker" in text and "100.00" in text  # the broker's slope
    assert "3.000" in text  # the trace's MB per 1,000 emails
    assert "up again in 1.25 s with 9.0 MB of trace" in text


def test_file_families_group_segments_and_leave_out_keys(tmp_path: Path) -> None:
    """trace.jsonl and its segments are one family, a folder is one, keys and pids are none."""
    (tmp_path / "trace.jsonl").write_bytes(b"x" * 10)
    (tmp_path / "trace-000001.jsonl").write_bytes(b"x" * 5)
    (tmp_path / "journal.bin").write_bytes(b"x" * 3)
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "keys.sqlite").write_bytes(b"x" * 7)
    for hidden in ("keys", "run"):
        (tmp_path / hidden).mkdir()
        (tmp_path / hidden / "a").write_bytes(b"x" * 100)
    assert soak.file_bytes(tmp_path) == {"trace": 15, "journal": 3, "ledger": 7}


def test_rss_of_this_process_is_read_and_a_dead_pid_skipped() -> None:
    """VmRSS from /proc in MiB; a pid that is gone is left out, not an error."""
    import os

    found = soak.rss_mib({"me": os.getpid(), "gone": 2 ** 22 + 1})
    assert set(found) == {"me"} and found["me"] > 1


@pytest.mark.parametrize("args", [["--soak", "0"], ["--soak", "1", "--rate", "-5"],
                                  ["--soak", "1", "--model-url", "http://x"]])
def test_bad_soak_options_are_usage_errors(args: list[str]) -> None:
    """A soak of no time, a negative rate or a model URL: argparse's exit 2."""
    with pytest.raises(SystemExit) as exited:
        bench_main.parse(args)
    assert exited.value.code == 2


def test_the_warm_up_defaults_to_a_fifth_of_the_run_at_most_a_minute() -> None:
    assert bench_main.parse(["--soak", "1"]).warmup_s == 12
    assert bench_main.parse(["--soak", "10"]).warmup_s == 60


def test_a_flat_slope_is_never_shown_negative_zero() -> None:
    """-0.001 MiB rounds to 0.00 in the table, not -0.00."""
    assert growth._num(-0.001, 2) == "0.00" and growth._num(-0.5, 2) == "-0.50" and growth._num(None, 1) == "n/a"
