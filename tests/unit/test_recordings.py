"""The shipped recordings answer what the offline demos ask, and nothing else.

A recording is keyed by the digest of the whole prompt (instruction, examples, email), so
changing a task's prompt silently orphans its recordings: the demos then end `rejected
(there is no answer)` with no model. These tests read the task files and the samples and
fail on the first prompt change that was not recorded again with `airlock record`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from airlock import task as task_module
from reader import prompt, recordings
from reader.mail import ParsedEmail, parse
from validator.narrow import Value, read_value

ROOT = Path(__file__).resolve().parents[2]
TASKS = sorted((ROOT / "tasks").glob("*.toml"))
SAMPLES = sorted((ROOT / "samples").glob("*.eml"))
RECORDED = sorted((ROOT / "samples" / "recorded").glob("*.jsonl"))


def recorded_tasks() -> list[task_module.Task]:
    """Every task file (a [reader] table; principals.toml is data beside them) that names
    recordings. A task file that does not load fails here, loudly."""
    files = [p for p in TASKS if "reader" in tomllib.loads(p.read_text())]
    return [t for t in map(task_module.load, files) if t.recordings_path is not None]


def digest_of(task: task_module.Task, sample: Path) -> str:
    parsed = parse(sample.read_bytes(), "eml")
    assert isinstance(parsed, ParsedEmail), sample.name
    return prompt.digest(prompt.for_email(task.reader, parsed)[0])


def test_the_tasks_and_samples_are_found() -> None:
    """The parametrized checks below run over every shipped task with recordings."""
    names = {t.name for t in recorded_tasks()}
    assert {"order_status", "order_status_guarded", "refund_request", "refund_with_approval"} <= names
    assert len(SAMPLES) >= 10 and RECORDED


@pytest.mark.parametrize("task", recorded_tasks(), ids=lambda t: t.name)
def test_every_sample_has_a_recording_for_every_task(task: task_module.Task) -> None:
    """Any sample runs offline under any shipped task: its prompt has a recorded answer."""
    found = recordings.load(task.recordings_path)
    missing = [s.name for s in SAMPLES if digest_of(task, s) not in found]
    assert missing == [], (f"{task.name}: no recording for {missing}; after a prompt change run "
                           f"airlock record --task {task.path} --model-url URL samples/")


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_no_recording_is_stale(path: Path) -> None:
    """Each recording answers the prompt of some shipped task for some sample: none is left
    over from an earlier prompt, where nothing could ever find it."""
    wanted = {digest_of(t, s) for t in recorded_tasks()
              if t.recordings_path is not None and t.recordings_path.resolve() == path.resolve() for s in SAMPLES}
    stale = [(r.origin, r.answer) for r in recordings.load(path).values() if r.digest not in wanted]
    assert stale == []


def test_the_approval_demo_email_is_answered_with_one_of_the_choices() -> None:
    """The approval demo of docs/gate.md, offline: the recorded answer for samples/refund_damaged.eml
    passes the refund task's narrow type, so the email escalates instead of ending rejected."""
    task = task_module.load(ROOT / "tasks" / "refund_with_approval.toml")
    recording = recordings.load(task.recordings_path)[digest_of(task, ROOT / "samples" / "refund_damaged.eml")]
    assert read_value(recording.answer, task.value) == Value("damaged")
