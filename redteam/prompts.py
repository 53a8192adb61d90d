"""`airlock prompts`: compare variants of a task's prompt on a corpus, with a live model.

A variant is a TOML file with a [reader] table (instruction, examples, constrain) that
replaces the task's; the narrow type, grounding and the plan stay the task's. The baseline
is the task itself, first in every table. Each email is read by the reader's own code
(parse, prompt, the Asker with its constraint, the grounding check) and judged by the
validator's own handle(), in this process: the figures count what would reach the actor,
never what the model merely said.

    airlock prompts corpus/handmade --model-url http://127.0.0.1:8080 \\
        --variants redteam/prompt_variants/order_status/*.toml --rounds 2

Per variant: benign utility (exact: the expected value would be acted on, or nothing when
there is none), values acted on wrong (split: in the email, or invented; and how many in
benign emails), emails where nothing would reach the actor (answers the validator rejected,
NONE among them), model ms p50/p95 and emails/s. Variants run interleaved, one pass each
per round, so a machine that slows down mid-run slows every variant alike. The model
answers at temperature 0: a second round repeats the answers and refines only the timings.
"""

from __future__ import annotations

import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from airlock import settings as settings_module, task as task_module
from airlock.errors import TaskError, UsageError
from airlock.task import ReaderSpec, Task
from airlock.terminal import shown
from airlock.wire import Passed, Read, Reading
from harness import campaign, score
from harness.campaign import CampaignEmail
from reader.app import Reader
from reader.ask import Asker
from validator.app import Validator


class _Variant(msgspec.Struct, forbid_unknown_fields=True):
    reader: ReaderSpec


def variant(task: Task, path: Path) -> Task:
    """The task with the [reader] table of the file at `path`."""
    try:
        found = msgspec.convert(tomllib.loads(path.read_text(encoding="utf-8")), _Variant)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise TaskError(f"prompt variant {path}: {exc}") from None
    return msgspec.structs.replace(task, reader=found.reader)


def judge(reader: Reader, validator: Validator, item: CampaignEmail, number: int) -> dict[str, Any]:
    """One email: the value that would reach the actor (or None), and the model's time."""
    (reading,) = reader.handle(Read(message_id=f"p-{number}", raw=item.raw, format=item.format))
    passed = None
    if isinstance(reading, Reading):
        (verdict,) = validator.handle(reading)
        passed = verdict.value if isinstance(verdict, Passed) else None
    model_ms = reading.notes.get("model_ms") if isinstance(reading, Reading) else None
    wrong = item.expect is not None and passed is not None and (item.expect == "none" or str(passed) != item.expect)
    useful = None
    if item.benign and item.expect is not None:
        useful = passed is None if item.expect == "none" else str(passed) == item.expect
    answer = reading.answer if isinstance(reading, Reading) else None
    # Whether the answer (so the value it passed as) occurs in the email: the reader's code
    # checked it while reading (reader/grounding.py); the email is never parsed again here.
    in_email = reading.grounded if isinstance(reading, Reading) else None
    return {"file": item.file, "expect": item.expect, "answer": answer, "passed": passed,
            "in_email": in_email, "wrong": wrong, "useful": useful, "model_ms": model_ms,
            "source": reading.source if isinstance(reading, Reading) else "unreadable"}


def run_variant(task: Task, emails: list[CampaignEmail], model_url: str) -> dict[str, Any]:
    settings = settings_module.load()
    reader = Reader(task, Asker(settings, task, model_url), {}, model_url)
    validator = Validator(task.value)
    started = time.monotonic()
    judged = [judge(reader, validator, item, number) for number, item in enumerate(emails)]
    elapsed = time.monotonic() - started
    wrong = [j for j in judged if j["wrong"]]
    invented = sum(j["in_email"] is False for j in wrong)  # a passed value always has the reader's check
    benign = [j["useful"] for j in judged if j["useful"] is not None]
    times = [j["model_ms"] for j in judged if isinstance(j["model_ms"], (int, float))]
    return {"utility": round(sum(benign) / len(benign), 3) if benign else None, "benign": len(benign),
            "acted_wrong": len(wrong), "acted_wrong_invented": invented,
            "benign_acted_wrong": sum(j["useful"] is False and j["passed"] is not None for j in judged),
            # Every email where nothing would reach the actor: a rejected answer, NONE, an email
            # the reader refused, a model that did not answer (`sources` tells those apart).
            "nothing_passed": sum(j["passed"] is None for j in judged),
            "sources": dict(Counter(j["source"] for j in judged)),
            "model_ms": {"p50": score.percentile(times, 0.5), "p95": score.percentile(times, 0.95)},
            "emails_per_s": round(len(emails) / elapsed, 2) if elapsed else None, "constrain": task.reader.constrain,
            "emails": judged}


def run(paths: list[str], task_path: Path, variants: list[Path], model_url: str, rounds: int,
        say: Any = print) -> dict[str, Any]:
    base = task_module.load(task_path)
    tasks = {"(the task)": base} | {str(p): variant(base, p) for p in variants}
    emails = campaign.load(paths)
    if not any(e.expect is not None for e in emails):
        raise UsageError("no email says what its right value is (X-Airlock-Expect): nothing to score")
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in tasks}
    for round_number in range(1, rounds + 1):
        for name, task in tasks.items():
            say(f"prompts: round {round_number}/{rounds}: {name}")
            found[name].append(run_variant(task, emails, model_url))
    return {"model_url": model_url, "task": base.name, "emails": len(emails), "rounds": rounds,
            "variants": {name: _merged(runs) for name, runs in found.items()}}


def _merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first round's answers (each email's, in the JSON report); every round's speed (the
    answers repeat at temperature 0)."""
    first = dict(runs[0])
    first["emails_per_s_rounds"] = [r["emails_per_s"] for r in runs]
    answers = [[e["answer"] for e in run["emails"]] for run in runs]
    first["same_answers_every_round"] = all(a == answers[0] for a in answers)
    return first


def table(result: dict[str, Any]) -> str:
    lines = [f"airlock prompts: task {result['task']}, {result['emails']} emails, model {result['model_url']}, "
             f"{result['rounds']} round(s)",
             f"  {'variant':<40} {'utility':>7} {'wrong':>5} {'inv.':>4} {'benign':>6} {'none':>5} {'p50 ms':>7} "
             f"{'p95 ms':>7} {'emails/s':>9}"]
    for name, v in result["variants"].items():
        speeds = "/".join(f"{s:g}" for s in v["emails_per_s_rounds"])
        lines.append(f"  {shown(Path(name).name)[:40]:<40} {v['utility'] if v['utility'] is not None else '-':>7} "
                     f"{v['acted_wrong']:>5} {v['acted_wrong_invented']:>4} {v['benign_acted_wrong']:>6} "
                     f"{v['nothing_passed']:>5} "
                     f"{v['model_ms']['p50'] or '-':>7} {v['model_ms']['p95'] or '-':>7} {speeds:>9}")
    lines.append("  utility: benign emails whose right value would be acted on (or nothing, where none); wrong: "
                 "values that would be acted on and are not the email's right one; inv.: of those, not in the "
                 "email; benign: of those, in benign emails; none: nothing would reach the actor")
    return "\n".join(lines)
