"""The validator's handle(): Reading in, Passed or Rejected out.

In a lab the student's check() may stand in the validator's place (plug point
"validator.check", airlock.student). It decides first, in its own child process; the
kernel's read_value still runs on every answer it passes, so a wrong student checker can
only refuse more, never let a non-narrow value through. Every verdict it took part in
carries student="validator.check", and where it and the kernel disagree the rule says so:
student.refused, student.failed, student.not_narrow, student.changed.
"""

from __future__ import annotations

import threading

from airlock.service import serve_role
from airlock.settings import Settings
from airlock.student import StudentCode, StudentFailed
from airlock.task import NarrowType, Task
from airlock.transport import Channel
from airlock.wire import Message, Passed, Reading, Rejected
from validator.narrow import Value, read_value, shown_answer

# The reader is the untrusted stage: its explanation reaches the Result, the trace, the
# SMTP reply and the page, so it is cut here to a length a person reads at a glance.
READER_EXPLANATION_LIMIT_CHARS = 300
PLUG_POINT = "validator.check"


class Validator:
    def __init__(self, narrow: NarrowType, student: StudentCode | None = None) -> None:
        self.narrow, self.value_type = narrow, narrow.msgspec_type()
        self.student = student

    def handle(self, message: Message) -> list[Message]:
        match message:
            case Reading() if self.student is not None:
                return [self._with_student(message, self.student)]
            case Reading(message_id=message_id, answer=answer, truncated=truncated, no_answer_because=because):
                match read_value(answer, self.narrow, truncated=truncated, value_type=self.value_type):
                    case Value(value=value):
                        return [Passed(message_id=message_id, value=value)]
                    case broken:
                        return [Rejected(message_id=message_id, rule=broken.rule,
                                         reason=_explained(broken.reason, answer, because))]
        return []  # this role's decoder admits only Reading

    def _with_student(self, reading: Reading, student: StudentCode) -> Passed | Rejected:
        """The student's check() first, then the kernel's read_value on the same answer.

        Data: the reader's answer (free text from a model that read hostile mail) and what
        the student's check() returned for it. Rationale: the kernel's rule is the floor. A
        student who passes what the kernel refuses (student.not_narrow) or returns other
        text than the answer, a repair (student.changed), is refused and told so; a student
        whose function fails is refused too (fail closed, student.failed).
        """
        message_id, answer = reading.message_id, reading.answer

        def rejected(rule: str, reason: str) -> Rejected:
            return Rejected(message_id=message_id, rule=rule, reason=reason, student=PLUG_POINT)

        returned = student.call("check", answer)
        if isinstance(returned, StudentFailed):
            return rejected("student.failed", returned.describe())
        if returned is None:
            return rejected("student.refused", _explained(
                f"your check() refused the reader's answer {shown_answer(answer)}", answer,
                reading.no_answer_because))
        verdict = read_value(answer, self.narrow, truncated=reading.truncated, value_type=self.value_type)
        if not isinstance(verdict, Value):
            return rejected("student.not_narrow", f"your check() passed {shown_answer(answer)} -> the kernel "
                                                  f"refused it: {verdict.reason} (rule {verdict.rule})")
        if type(returned) is not str or returned != answer:
            return rejected("student.changed", f"your check() returned {_shown_returned(returned)} for "
                                               f"{shown_answer(answer)}: a checker passes the answer unchanged "
                                               f"or refuses it (None), it never repairs")
        return Passed(message_id=message_id, value=verdict.value, student=PLUG_POINT)


def _explained(reason: str, answer: str, because: str) -> str:
    """An empty answer the reader explained: the reason says why (model down, no
    recording), so nobody has to dig for it in the trace."""
    return f"{reason}: {_capped(because)}" if because and not answer else reason


def _shown_returned(returned: object) -> str:
    return shown_answer(returned) if isinstance(returned, str) else f"the {type(returned).__name__} {returned!r}"[:80]


def _capped(because: str) -> str:
    """The reader's explanation cut to READER_EXPLANATION_LIMIT_CHARS, marked when cut."""
    if len(because) <= READER_EXPLANATION_LIMIT_CHARS:
        return because
    return because[:READER_EXPLANATION_LIMIT_CHARS] + "…"


def student_checker(settings: Settings) -> StudentCode | None:
    """The student's file when AIRLOCK_STUDENT_CODE plugs one into this service, else None."""
    plug = settings.student_code
    if plug is None or plug.point != PLUG_POINT:
        return None
    return StudentCode(plug.path, settings.student_timeout_s)


def serve(settings: Settings, task: Task, stop: threading.Event,
          channel: Channel | None = None) -> None:
    student = student_checker(settings)
    try:
        serve_role(settings, "validator", Validator(task.value, student).handle, settings.worker_credit, stop,
                   channel)
    finally:
        if student is not None:
            student.close()
