"""The validator's handle(): Reading in, Passed or Rejected out.

In a lab the student's check() may stand in the validator's place (plug point
"validator.check", studentcode.student). It decides first, in its own child process; the
kernel's read_value still runs on every answer it passes, so a wrong student checker can
only refuse more, never let a non-narrow value through. Every verdict it took part in
carries student="validator.check", and where it and the kernel disagree the rule says so:
student.refused, student.failed, student.not_narrow, student.changed.

A task with `[value] grounded = true` also rejects a value of the narrow type that the
reader's code did not find in the email (`value.not_in_email`), with or without a student's
checker: see _ungrounded, and reader/grounding.py for where the check runs and why.
"""

from __future__ import annotations

import threading

from airlock.service import serve_role
from airlock.settings import Settings
from airlock.task import NarrowType, Task
from airlock.transport import Channel
from airlock.wire import Message, Passed, Reading, Rejected
from studentcode.student import StudentCode, StudentFailed
from validator.narrow import Broken, Value, read_value, shown_answer

# The reader is the untrusted stage: its explanation reaches the Result, the trace, the
# SMTP reply and the page, so it is cut here to a length a person reads at a glance.
READER_EXPLANATION_LIMIT_CHARS = 300
PLUG_POINT = "validator.check"
GROUNDING_RULE = "value.not_in_email"  # a value of the narrow type that the email does not hold


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
                        if (ungrounded := self._ungrounded(message)) is not None:
                            return [Rejected(message_id=message_id, rule=ungrounded.rule, reason=ungrounded.reason)]
                        return [Passed(message_id=message_id, value=value)]
                    case broken:
                        return [Rejected(message_id=message_id, rule=broken.rule,
                                         reason=_explained(broken.reason, answer, because))]
        return []  # this role's decoder admits only Reading

    def _ungrounded(self, reading: Reading) -> Broken | None:
        """The task's grounding rule, on a value already of the narrow type.

        Data: the task's `[value] grounded` and the Reading's `grounded`, which the reader's
        code set from the email (reader/grounding.py); the validator never sees the email.
        Rationale: a value the email does not contain was invented (often copied from the
        prompt's examples), so a task that asks for grounding rejects it. Only true passes:
        a Reading that says nothing (a reader from before the check) fails closed. This
        trusts the reader's code, not the model; see reader/grounding.py for why that is the
        most a gate without the email can do, and why it is no isolation boundary.
        """
        if not self.narrow.grounded or reading.grounded is True:
            return None
        quoted = shown_answer(reading.answer)
        if reading.grounded is None:
            return Broken(GROUNDING_RULE, f"the reader did not say whether {quoted} is in the email (a reader "
                                          f"from before grounding?); this task accepts only values the email contains")
        return Broken(GROUNDING_RULE, f"{quoted} is not in the email as a token of its own: the model made it up "
                                      f"or copied it from elsewhere; this task accepts only values the email contains")

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
        if (ungrounded := self._ungrounded(reading)) is not None:  # the kernel's floor, as read_value is
            return rejected(ungrounded.rule, ungrounded.reason)
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
