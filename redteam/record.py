"""`airlock record`: ask a live model about sample emails and keep its real answers.

The recordings are what the reader falls back on when no model answers. They are only
ever real answers from a real endpoint: an email the model fails on is not recorded.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airlock import settings as settings_module, sources, task as task_module
from airlock.errors import TaskError
from airlock.terminal import shown
from reader import mail, model, prompt, recordings
from reader.ask import Asker


def run(files: list[str], model_url: str, task_path: str | None = None) -> int:
    """An AirlockError (a bad setting or task, a missing file) goes up to cli.runtime.handled,
    which prints it escaped and exits with its code."""
    settings = settings_module.load()
    task = task_module.load(task_path or settings.task)
    paths = list(sources.expand(files))
    target = task.recordings_path
    if target is None:
        raise TaskError(f"task {task.path} names no recordings file")
    found = recordings.load(target)
    ask = Asker(settings, task, model_url)  # the reader's own way of asking, constraint included
    failures = 0
    for path in paths:
        parsed = mail.parse(sources.read(path), sources.format_of(path))
        if isinstance(parsed, mail.MailProblem):
            print(f"skip  {path}: {shown(parsed.reason)}")  # the reason can quote the email
            continue
        messages, _ = prompt.for_email(task.reader, parsed)
        answer = ask(messages)
        if isinstance(answer, model.ModelFailure):
            print(f"FAIL  {path}: {answer.kind}: {shown(answer.detail)}")  # the model server's words
            failures += 1
            continue
        key = prompt.digest(messages)
        found[key] = recordings.Recording(
            digest=key, answer=answer.text, model=settings.model_name, origin=path.name,
            recorded_at=datetime.now(UTC).isoformat(timespec="seconds"))
        print(f"ok    {path}: {answer.text!r}")
    recordings.save(target, found)
    print(f"{len(found)} recordings in {target}")
    return 1 if failures else 0

