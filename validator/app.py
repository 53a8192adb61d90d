"""The validator's handle(): Reading in, Passed or Rejected out."""

from __future__ import annotations

import threading

from airlock.service import serve_role
from airlock.settings import Settings
from airlock.task import NarrowType, Task
from airlock.transport import Channel
from airlock.wire import Message, Passed, Reading, Rejected
from validator.narrow import Value, read_value

# The reader is the untrusted stage: its explanation reaches the Result, the trace, the
# SMTP reply and the page, so it is cut here to a length a person reads at a glance.
READER_EXPLANATION_LIMIT_CHARS = 300


class Validator:
    def __init__(self, narrow: NarrowType) -> None:
        self.narrow, self.value_type = narrow, narrow.msgspec_type()

    def handle(self, message: Message) -> list[Message]:
        match message:
            case Reading(message_id=message_id, answer=answer, truncated=truncated, no_answer_because=because):
                match read_value(answer, self.narrow, truncated=truncated, value_type=self.value_type):
                    case Value(value=value):
                        return [Passed(message_id=message_id, value=value)]
                    case broken:
                        # An empty answer the reader explained: the reason says why (model
                        # down, no recording), so nobody has to dig for it in the trace.
                        reason = f"{broken.reason}: {_capped(because)}" if because and not answer else broken.reason
                        return [Rejected(message_id=message_id, rule=broken.rule, reason=reason)]
        return []  # this role's decoder admits only Reading


def _capped(because: str) -> str:
    """The reader's explanation cut to READER_EXPLANATION_LIMIT_CHARS, marked when cut."""
    if len(because) <= READER_EXPLANATION_LIMIT_CHARS:
        return because
    return because[:READER_EXPLANATION_LIMIT_CHARS] + "…"


def serve(settings: Settings, task: Task, stop: threading.Event,
          channel: Channel | None = None) -> None:
    serve_role(settings, "validator", Validator(task.value).handle, settings.worker_credit, stop, channel)
