"""airlock bench (python -m bench) [--emails N] [--readers N] [--json FILE] [--model-url URL] [--latency-emails N]
                                      [--soak MINUTES [--rate N] [--sample-s S] [--warmup-s S]]

Without --model-url: the separated throughput run, the low-rate latency run (both on one
private `airlock up` with recorded answers), then the in-process baseline. With
--model-url: a small batch, one email in flight, through that endpoint (airlock's share of
each email's time), then the corpus (--corpus, default corpus/handmade) as `airlock attack`
runs it, readers matched to the model: utility, value mismatches, emails/s. With --soak: the
stack at a steady rate for MINUTES, with RSS per process over time, file growth per 1,000
emails and the restart time at the end (bench/soak.py). A table goes to stdout,
progress to stderr, every figure to --json FILE.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airlock import sources
from airlock.interpreter import python_command
from airlock.wire import Email
from bench import CORPUS, SAMPLE, TASK, baseline, pipeline, report, soak
from harness.attack import PrivateStack, progress_bar

DEFAULT_EMAILS = 20_000
DEFAULT_MODEL_EMAILS = 50
DEFAULT_LATENCY_EMAILS = 500
CORPUS_TIMEOUT_S = 1800.0  # for every outcome of the corpus run: 172 emails at 1 a second fit


def build_parser() -> argparse.ArgumentParser:
    """`airlock bench`'s options (docs/cli.md's table is checked against them)."""
    parser = argparse.ArgumentParser(prog="airlock bench", description=__doc__.split("\n\n")[1])
    parser.add_argument("--emails", type=int, help=f"emails to push (default {DEFAULT_EMAILS:,}; "
                                                   f"{DEFAULT_MODEL_EMAILS} with --model-url)")
    parser.add_argument("--readers", type=int, help="reader processes (default 1; with --model-url, as many "
                        "as the model serves at once)")
    parser.add_argument("--json", metavar="FILE", help="write every figure here as JSON")
    parser.add_argument("--model-url", help="an OpenAI-compatible endpoint: measure airlock's share of each email")
    parser.add_argument("--corpus", default=str(CORPUS),
                        help="--model-url: the emails to score the model on (default corpus/handmade)")
    parser.add_argument("--latency-emails", type=int, default=DEFAULT_LATENCY_EMAILS,
                        help=f"emails for the one-in-flight latency run (default {DEFAULT_LATENCY_EMAILS})")
    parser.add_argument("--soak", type=float, metavar="MINUTES",
                        help="instead: run the stack at a steady rate for MINUTES; memory and files over time")
    parser.add_argument("--rate", type=float, default=soak.DEFAULT_RATE,
                        help=f"--soak: emails a second to submit (default {soak.DEFAULT_RATE:g})")
    parser.add_argument("--sample-s", type=float, default=soak.SAMPLE_S,
                        help=f"--soak: seconds between samples (default {soak.SAMPLE_S:g})")
    parser.add_argument("--warmup-s", type=float,
                        help="--soak: seconds before memory is judged (default a fifth of the run, at most 60)")
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.soak is not None:
        if args.model_url:
            parser.error("--soak runs on recorded answers: it takes no --model-url")
        for name in ("soak", "rate", "sample_s"):
            if getattr(args, name) <= 0:
                parser.error(f"--{name.replace('_', '-')} must be more than 0")
        if args.warmup_s is None:
            args.warmup_s = min(60.0, args.soak * 60 / 5)
    if args.emails is None:
        args.emails = DEFAULT_MODEL_EMAILS if args.model_url else DEFAULT_EMAILS
    if args.readers is None and not args.model_url:
        args.readers = 1  # with a model, as many as it serves at once (harness/attack.py match_model)
    for name in ("emails", "readers", "latency_emails"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    raw = SAMPLE.read_bytes()
    sender = sources.sender_of(raw, "eml")
    email = Email(raw, "eml", SAMPLE.name, sender)
    figures: dict[str, Any] = {"machine": report.machine(), "sample": SAMPLE.name, "task": TASK.name}
    with tempfile.TemporaryDirectory(prefix="airlock-bench-") as scratch:
        if args.soak is not None:
            figures["soak"] = soak.run(Path(scratch) / "soak", email, args.soak, args.rate, args.readers,
                                       args.sample_s, args.warmup_s, say)
        elif args.model_url:
            say(f"starting airlock up with the model at {args.model_url}")
            with PrivateStack(Path(scratch) / "model", TASK, args.model_url, args.readers or 1) as settings:
                say(f"{args.emails} emails through the model, one in flight")
                figures["model"] = pipeline.with_model(settings, email, args.emails, progress_bar())
            say(f"the corpus {args.corpus} through the model, as `airlock attack` runs it")
            figures["model_corpus"] = corpus_figures(args.corpus, args.model_url, args.readers)
        else:
            say(f"starting airlock up with {args.readers} reader(s), no model (recorded answers)")
            with PrivateStack(Path(scratch) / "stack", TASK, None, args.readers) as settings:
                say(f"separated: {args.emails:,} emails as fast as the intake takes them")
                figures["separated"] = pipeline.throughput(settings, email, args.emails, args.readers, progress_bar())
                say(f"low rate: {args.latency_emails} emails, one in flight")
                figures["low_rate"] = pipeline.low_rate(settings, email, args.latency_emails, progress_bar())
            say(f"baseline: {args.emails:,} emails through the handle() chain in this process")
            figures["baseline"] = baseline.run(Path(scratch) / "baseline", TASK, raw, sender, args.emails,
                                               progress_bar())
            separated, alone = figures["separated"]["emails_per_s"], figures["baseline"]["emails_per_s"]
            figures["ratio"] = round(separated / alone, 4) if separated and alone else None
    figures["bench_s"] = round(time.perf_counter() - started, 1)
    figures["machine"]["loadavg_end"] = report.loadavg()
    return figures


def corpus_figures(corpus: str, model_url: str, readers: int | None) -> dict[str, Any]:
    """`airlock attack`'s summary of the corpus through the model: utility, mismatches split
    by whether the email held the value, emails/s and latency (harness/score.py)."""
    from airlock import task as task_module
    from harness import attack

    result = attack.run([corpus], "separated", task_module.load(TASK), model_url, readers, CORPUS_TIMEOUT_S,
                        False, progress_bar())
    return {"corpus": corpus, **result["summary"]}


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table and write --json; a failure is raised for the caller to
    report (`airlock bench` runs this through the one handler, cli/handling.py, as every command)."""
    args = parse(argv)
    figures = run(args)
    print(report.table(figures))
    if args.json:
        report.write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    # Every command's failures are reported by the CLI's one handler, which the benchmark
    # does not import (the CLI sits above it): a direct run becomes `python -m lab bench`.
    os.execv(sys.executable, python_command("-m", "lab", "bench", *sys.argv[1:]))
