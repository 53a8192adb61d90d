"""A verdict that ran a student's code is marked in the trace and in `airlock trace`; a
verdict or trace line from before the mark existed reads as it always did."""

from __future__ import annotations

import json

import msgspec
import pytest

from airlock import records, trace, wire
from airlock.wire import Hello, Passed, Reading, Rejected, Submit
from broker.router import Router

R, V, A, CLIENT = b"r", b"v", b"a", b"c"


def verdict_line(settings, verdict: Passed | Rejected) -> dict:
    router = Router(settings, boot=0xABC)
    for role, identity in (("reader", R), ("validator", V), ("actor", A)):
        router.handle(role, identity, Hello(credit=4), 0.0)
    router.handle("intake", CLIENT, Submit(ref=1, raw=b"Order 4411", format="text"), 0.0)
    router.handle("reader", R, Reading(message_id="abc-1", answer="4411", source="model"), 1.0)
    effects = router.handle("validator", V, msgspec.structs.replace(verdict, message_id="abc-1"), 2.0)
    (line,) = [json.loads(e) for e in effects if isinstance(e, bytes) and b'"verdict"' in e]
    return line


@pytest.mark.parametrize("verdict", [
    pytest.param(Passed(message_id="", value="4411", student="validator.check"), id="passed"),
    pytest.param(Rejected(message_id="", rule="student.not_narrow", reason="your check() passed '٤٤١١'",
                          student="validator.check"), id="rejected"),
])
def test_the_verdict_line_names_the_plug_point_and_trace_shows_it(settings, verdict) -> None:
    """The router writes `student` into the verdict line; `airlock trace` shows it."""
    line = verdict_line(settings, verdict)
    assert line["student"] == "validator.check"
    assert "student code: validator.check" in trace.render(records.decode(json.dumps(line).encode()))


def test_a_verdict_without_student_code_has_no_mark(settings) -> None:
    """No student code, no `student` key: the line is what it was before labs existed."""
    line = verdict_line(settings, Passed(message_id="", value="4411"))
    assert "student" not in line and "student code" not in trace.render(records.decode(json.dumps(line).encode()))


def test_a_verdict_from_before_the_field_still_decodes() -> None:
    """An old validator's Passed/Rejected (no `student`) decodes, with student ""."""
    old = msgspec.msgpack.encode({"kind": "rejected", "message_id": "m", "rule": "r", "reason": "x"})
    decoded = wire.inbound_decoder("validator")(old)
    assert isinstance(decoded, Rejected) and decoded.student == ""
    assert wire.encode(Passed(message_id="m", value="1")) == msgspec.msgpack.encode(
        {"kind": "passed", "message_id": "m", "value": "1"})
