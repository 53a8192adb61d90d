"""The base of every trace record, and the time stamp every record carries.

Part of the trace contract that airlock.records owns and re-exports (read that module's
docstring for the rules): here only so that the records about no one email
(airlock.recordfacts) and those about one email (airlock.records) share one base without
an import cycle. Import these from airlock.records.
"""

from __future__ import annotations

import time
from typing import ClassVar

import msgspec

_second: tuple[int, str] = (-1, "")  # the last whole second stamped, and its text


def utc_now() -> str:
    """Now as 2026-11-30T04:48:01.123456Z. The date and time of day are formatted once a
    second: the broker stamps six lines an email or more, and datetime's isoformat each time
    was a tenth of its work (at ten lines an email)."""
    global _second
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    stamp = _second  # one read: another thread may replace it, never half of it
    if stamp[0] != seconds:
        stamp = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{stamp[1]}.{nanos // 1000:06d}Z"


class Record(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="event"):
    """Base of every typed trace line: `Received(at, message_id, "broker", origin=...)`.

    frozen: a record is a fact, read by many. omit_defaults: a field left at its default is
    not written (rule 1 above). Unknown fields are ignored on decode (rule 2). `STAGE`: the
    one stage that may say this event; `decode` makes a line from any other stage Damaged,
    so a reader that matched a type may trust who said it.

    Every event repeats `frozen=True, kw_only=True`, and cannot say it once here: msgspec
    inherits frozen but mypy does not (a subclass without it is an error), and kw_only
    covers only the fields a class itself defines (its own by name, these three by place)."""

    STAGE: ClassVar[str] = "broker"
    at: str
    message_id: str | None
    stage: str
