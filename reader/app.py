"""The reader's handle(): Read in, one Reading (or Unreadable) out. No tools, ever."""

from __future__ import annotations

import threading
from collections.abc import Callable

from airlock.service import serve_role
from airlock.settings import Settings
from airlock.task import Task, describe_recordings
from airlock.terminal import shown
from airlock.transport import Channel
from airlock.wire import Message, Note, Read, Reading, ReadingSource, Unreadable
from reader import grounding, mail, model, prompt, recordings
from reader.ask import Asker
from reader.recordings import Recording

ASCII_WHITESPACE = " \t\n\r\x0b\x0c"
MAX_ANSWER_CHARS = 4096  # longer answers are cut and flagged; the validator rejects them
MAX_DETAIL_CHARS = 200  # of a model failure's detail, in the reason an email without an answer ends with
Ask = Callable[[prompt.ChatMessages], "model.ModelAnswer | model.ModelFailure"]


def not_configured(messages: prompt.ChatMessages) -> model.ModelFailure:
    return model.ModelFailure("not_configured", "no model URL is set")


class Reader:
    def __init__(self, task: Task, ask: Ask, recorded: dict[str, Recording], model_url: str | None = None) -> None:
        self.task, self.ask, self.recorded, self.model_url = task, ask, recorded, model_url

    def handle(self, message: Message) -> list[Message]:
        match message:
            case Read():
                return [self.read(message)]
        return []  # this role's decoder admits only Read; anything else is not ours

    def read(self, message: Read) -> Reading | Unreadable:
        parsed = mail.parse(message.raw, message.format)
        if isinstance(parsed, mail.MailProblem):
            return Unreadable(message_id=message.message_id, rule=parsed.rule, reason=parsed.reason)
        messages, cut = prompt.for_email(self.task.reader, parsed)
        key = prompt.digest(messages)
        notes: dict[str, Note] = {  # wire values: each list is built as a list of Scalars
            "sender": parsed.sender[:200], "subject": parsed.subject[:200],
            "excerpt": parsed.body[:500], "body_chars": len(parsed.body), "prompt_cut": cut,
            "attachments": [*parsed.attachments[:20]], "defects": [*parsed.defects[:20]], "digest": key,
        }
        result = self.ask(messages)
        because = ""
        source: ReadingSource
        if isinstance(result, model.ModelAnswer):
            answer, source = result.text, "model"
            notes["model_ms"] = result.ms
            if result.constraint:
                notes["constraint"] = result.constraint
        else:
            notes["model_error"] = f"{result.kind}: {result.detail}"
            recording = self.recorded.get(key)
            answer, source = (recording.answer, "recorded") if recording else ("", "none")
            because = "" if recording else self.no_answer_because(result)
        answer = answer.strip(ASCII_WHITESPACE)
        return Reading(message_id=message.message_id, answer=answer[:MAX_ANSWER_CHARS],
                       source=source, truncated=len(answer) > MAX_ANSWER_CHARS, notes=notes,
                       no_answer_because=because,
                       grounded=self.grounded(answer, messages[-1]["content"], bool(parsed.subject)))

    def grounded(self, answer: str, text: str, has_subject: bool) -> bool | None:
        """Whether the answer is in the email as the model read it (the prompt's last message,
        prompt.email_text's Subject and body, cut where it was cut: reader/grounding.py); None when
        there is no answer to look for, or one too long for the validator to read anyway."""
        if not answer or len(answer) > MAX_ANSWER_CHARS:
            return None
        return grounding.in_email_text(answer, text, has_subject, self.task.value)

    def no_answer_because(self, failure: model.ModelFailure) -> str:
        """Both halves of "no answer": why the model gave none, and that no recording did."""
        if failure.kind == "not_configured":
            model_part = "no model is set (airlock up --model-url URL, or AIRLOCK_MODEL_URL)"
        else:
            # The detail may quote the model server (an HTTP reason phrase): cut and made visible.
            detail = shown(failure.detail[:MAX_DETAIL_CHARS])
            model_part = f"the model at {self.model_url or 'its URL'} did not answer ({failure.kind}: {detail})"
        return f"{model_part}, and there is no recording for this email"


def build(settings: Settings, task: Task) -> Reader:
    ask: Ask = not_configured
    if settings.model_url:
        ask = Asker(settings, task, settings.model_url)
    recorded = recordings.load(task.recordings_path)
    # Said once at start, so a task file copied away from its recordings is not silent.
    print(f"reader: recordings: {describe_recordings(task, len(recorded))}", flush=True)
    return Reader(task, ask, recorded, settings.model_url)


def serve(settings: Settings, task: Task, stop: threading.Event, channel: Channel | None = None) -> None:
    reader = build(settings, task)
    serve_role(settings, "reader", reader.handle, settings.reader_credit, stop, channel)
