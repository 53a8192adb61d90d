"""Raw JSON lines for tests that write what the broker never would: a line with only the
fields a test needs, a forged one, a torn one. The broker writes typed records only
(airlock.records); these go around that on purpose, to test the readers."""

from __future__ import annotations

from typing import Any

import msgspec

from airlock import records
from airlock.records import utc_now
from airlock.wire import Outcome

_encode = msgspec.json.Encoder().encode


def raw_line(stage: str, event: str, message_id: str | None, detail: dict[str, Any]) -> bytes:
    """One line as the untyped writer wrote it before the records were typed: the base
    fields first, then `detail` (which cannot override them)."""
    base = {"at": utc_now(), "message_id": message_id, "stage": stage, "event": event}
    return _encode({**base, **detail, **base}) + b"\n"


def expanded(line: bytes) -> list[bytes]:
    """The lines a trace line stands for (records.expand: a step line is its authorization,
    call and observation), each encoded again; a part that is no whole record fails here."""
    parts = records.expand(records.decode(line))
    whole = [part for part in parts if isinstance(part, records.Record | records.PeerFact)]
    assert len(whole) == len(parts), parts
    return [records.encode(part) for part in whole]


def json_object(raw: bytes) -> dict[str, Any] | None:
    """A line as a JSON object, or None for a torn line or one that is no object."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


# Whole records, as the broker writes them (airlock.records), for tests of the readers.

def received(message_id: str, origin: str = "t") -> bytes:
    return records.encode(records.Received(utc_now(), message_id, "broker", origin=origin, format="text", bytes=10,
                                           sender="", sender_proof="none"))


def model_answer(message_id: str, answer: str = "4411") -> bytes:
    return records.encode(records.ModelAnswer(utc_now(), message_id, "reader", layer="model_output", answer=answer,
                                              answer_chars=len(answer), source="model", truncated=False))


def outcome(message_id: str, outcome: Outcome = "completed") -> bytes:
    return records.encode(records.OutcomeLine(utc_now(), message_id, "broker", outcome=outcome, reason="",
                                              ended_at="actor", final=outcome != "escalated"))


def decision(message_id: str, approve: bool = True) -> bytes:
    return records.encode(records.DecisionTaken(utc_now(), message_id, "broker", layer="authorization",
                                                approve=approve, role="support-lead", by="dana", key="k",
                                                proven="CURVE key"))


def started() -> bytes:
    return records.encode(records.Started(utc_now(), None, "broker", endpoints={}, trace="trace.jsonl",
                                          authentication="off", sender_proofs="none kept"))
