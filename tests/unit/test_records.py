"""The persisted records (airlock.records): one type per event, one encoder, one decoder, and
the rule for adding a field, tested on files the previous version wrote.

tests/data/trace-v1.jsonl and calls-v1.jsonl were written by main before the records were
typed (tests/data/make-v1 says how): a small `airlock up` run, an approval, and the rarer
events driven through that version's Router.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from airlock import records, trace
from airlock.records import Call, Damaged, PeerFact, Record, Unrecognized
from airlock.wire import Reading
from broker import tracing

DATA = Path(__file__).parent.parent / "data"
V1_TRACE = (DATA / "trace-v1.jsonl").read_bytes().splitlines(keepends=True)
V1_CALLS = (DATA / "calls-v1.jsonl").read_bytes().splitlines(keepends=True)

# Each event's required fields (no default) as of v1. Rule 1: a field added later has a
# default, so an event's list never grows; a line written before the field still decodes.
REQUIRED_V1 = {
    "received": ["bytes", "format", "origin", "sender", "sender_proof"],
    "recovered": ["bytes", "origin"],
    "redelivery": ["attempt", "reason", "to"],
    "late_result": ["endpoint", "result"],
    "decision": ["approve", "by", "key", "layer", "proven", "role"],
    "decision_refused": ["claimed_by", "layer", "reason", "role"],
    "outcome": ["ended_at", "outcome", "reason"],
    "model_answer": ["answer", "answer_chars", "layer", "source", "truncated"],
    "unreadable": ["layer", "reason", "rule"],
    "verdict": ["layer", "verdict"],
    "authorization": ["decision", "key", "layer", "server", "step", "tool"],
    "call": ["args", "server", "step", "tool"],  # and message_id, at: no stage (calls.jsonl has none)
    "observation": ["layer", "result", "server", "step", "tool"],
    # A new event after v1 (one line per plan step), not new fields: rule 3.
    "step": ["decision", "key", "server", "step", "tool"],
    "violation": ["endpoint", "kind", "reason"],
    "malformed_frame": ["bytes", "endpoint", "reason"],
    "client_gone": ["messages"],
    "worker_joined": ["credit", "role"],
    "worker_lost": ["held", "reason", "role"],
    "started": ["authentication", "endpoints", "sender_proofs", "trace"],
    "stopped": ["in_flight"],
    "auth_refused": ["endpoint", "peer", "reason"],
    "handshake_failed": ["endpoint", "errno", "peer", "reason", "stalled_s"],
    "storage_failed": ["errno", "error", "file"],
    "storage_recovered": ["failed_for_s", "file", "refused"],
    "journal_compacted": ["bytes_after", "bytes_before", "freed", "live"],
    "journal_compaction_failed": ["bytes", "error"],
    "journal_damaged": ["bytes_skipped", "emails_lost", "path", "ranges", "ranges_skipped", "torn_tail"],
    "trace_damaged": ["files", "lines"],
    "trace_checkpoint": ["emails", "through_segment"],
    "trace_checkpoint_failed": ["error"],
}


def test_every_line_of_a_previous_version_trace_decodes_typed() -> None:
    """Every line v1 wrote is a typed record (or a peer's fact), none unknown or damaged."""
    decoded = [records.decode(line) for line in V1_TRACE]
    assert not [r for r in decoded if isinstance(r, (Damaged, Unrecognized))]
    kinds = {trace.event_of(r) for r in decoded if isinstance(r, Record)}
    assert len(kinds) >= 20  # the fixture covers most events, not a handful
    assert {type(r) for r in decoded if isinstance(r, PeerFact)} and any(
        r.stage == records.SUPERVISOR for r in decoded if isinstance(r, PeerFact))


def test_a_previous_version_line_encodes_back_to_the_same_object() -> None:
    """The new encoder writes what v1 wrote: same keys, same values (only the key order moved)."""
    for line in V1_TRACE:
        record = records.decode(line)
        assert isinstance(record, Record | PeerFact), line
        assert json.loads(records.encode(record)) == json.loads(line)


def test_a_previous_version_call_log_reads_as_the_shared_call_record() -> None:
    """calls.jsonl lines from before the shared type (no event, no stage) read as Call, and
    write back the same object with its tag."""
    for line in V1_CALLS:
        call = records.decode_call(line)
        assert isinstance(call, Call) and call.stage is None and call.status is None
        assert json.loads(records.encode(call)) == {**json.loads(line), "event": "call"}


def test_the_trace_reader_reads_the_previous_version_files(tmp_path: Path) -> None:
    """trace.read and trace.read_calls on v1's files: every line, in order, typed."""
    (tmp_path / "trace.jsonl").write_bytes(b"".join(V1_TRACE))
    (tmp_path / "calls.jsonl").write_bytes(b"".join(V1_CALLS))
    read = list(trace.read(tmp_path / "trace.jsonl"))
    assert len(read) == len(V1_TRACE) and all(isinstance(r, (Record, PeerFact)) for r in read)
    assert len(list(trace.read_calls(tmp_path / "calls.jsonl"))) == len(V1_CALLS)


def test_required_fields_never_grow() -> None:
    """Rule 1: a field added after v1 has a default. Failing here: give the new field a
    default (or, if older readers must not miss it, make it a new event: rule 3)."""
    def required_fields(kind: type[msgspec.Struct]) -> list[str]:
        info = msgspec.inspect.type_info(kind)
        assert isinstance(info, msgspec.inspect.StructType)
        return sorted(f.name for f in info.fields if f.required and f.name not in ("at", "message_id", "stage"))

    required = {kind.__struct_config__.tag: required_fields(kind) for kind in records.EVENT_TYPES}
    assert required == REQUIRED_V1


def test_an_unknown_field_is_ignored() -> None:
    """Rule 2: a newer writer's extra field is skipped, the record read as it was."""
    line = V1_TRACE[0].rstrip(b"}\n") + b',"added_later":{"x":1}}\n'
    assert records.decode(line) == records.decode(V1_TRACE[0])


def test_a_new_field_at_its_default_is_not_written() -> None:
    """omit_defaults: a field a line does not use is absent, so the line reads as before."""
    passed = records.Verdict("t", "m-1", "validator", layer="validator", verdict="passed", value="7")
    assert json.loads(records.encode(passed)) == {"event": "verdict", "at": "t", "message_id": "m-1",
                                                  "stage": "validator", "layer": "validator", "verdict": "passed",
                                                  "value": "7"}


@pytest.mark.parametrize(("line", "kind"), [
    pytest.param(b'{"at":"t","message_id":null,"stage":"broker","event":"future_event","x":1}\n', Unrecognized,
                 id="unknown-event"),
    pytest.param(b'{"at":"t","message_id":"m","stage":"broker","event":"outcome","outcome":"completed"}\n', Damaged,
                 id="known-event-missing-fields"),
    pytest.param(b'{"at":"t","message_id":"m","stage":"reader","event":"outcome","outcome":"completed",'
                 b'"reason":"","ended_at":"actor"}\n', Damaged, id="known-event-from-the-wrong-stage"),
    pytest.param(b'{"at":"t","message_id":"m","stage":"broker","event":"outcome","outcome":"won",'
                 b'"reason":"","ended_at":"actor"}\n', Damaged, id="a-value-outside-its-type"),
    pytest.param(b'{"at":"2026-', Damaged, id="torn"),
    pytest.param(b'[1, 2]\n', Damaged, id="not-an-object"),
    pytest.param(b'\xff\xfe\n', Damaged, id="not-utf8"),
    pytest.param(b'{"at":"t","message_id":null,"stage":"broker","event":"worker.note"}\n', Unrecognized,
                 id="a-worker-name-from-the-broker"),
    pytest.param(b'{"at":"t","message_id":"m","stage":"reader","event":"worker.note","n":1}\n', PeerFact,
                 id="a-worker-fact"),
    pytest.param(b'{"at":"t","message_id":null,"stage":"supervisor","event":"service_restarted"}\n', PeerFact,
                 id="a-supervisor-notice"),
])
def test_a_line_that_is_no_record_is_a_typed_value(line: bytes, kind: type) -> None:
    """Unknown, damaged or a peer's: always a typed value, never an exception or a guess."""
    assert type(records.decode(line)) is kind


def test_a_damaged_line_is_shown_escaped() -> None:
    """`airlock trace` shows a line it cannot read, with no hidden character left raw."""
    shown = trace.render(records.decode('{"at":"t","event":"outcome","reason":"\u202eevil\x1b[2J"'.encode()))
    assert "damaged" in shown and "\u202e" not in shown and "\x1b" not in shown


def test_an_unrecognized_line_is_shown_escaped_and_marked() -> None:
    line = '{"at":"2026-12-01T00:00:00.000000Z","message_id":"m\u202e","stage":"broker","event":"later","x":"\\u001b"}'
    shown = trace.render(records.decode(line.encode()))
    assert "(unknown)" in shown and "\u202e" not in shown and "\x1b" not in shown


def test_a_readers_notes_cannot_stand_for_a_broker_field() -> None:
    """A note this contract does not name goes to other_notes, never into a field."""
    fields = records.notes({"subject": "hi", "outcome": "completed", "answer": "9999"})
    assert fields == {"subject": "hi", "other_notes": {"outcome": "completed", "answer": "9999"}}


def test_every_typed_event_is_a_name_no_peer_may_take() -> None:
    """The broker's own names, which a worker or a notice may not write, are the records'."""
    from broker import events

    assert events.BROKER_EVENTS == records.EVENT_NAMES
    assert set(REQUIRED_V1) == set(records.EVENT_NAMES)


def test_as_line_gives_the_lines_own_json_values() -> None:
    """What the page and --json get from a record is what the line holds: a plan's pairs are
    lists there (a tuple would never equal a [server, tool] pair), defaults absent."""
    (call,) = [r for r in map(records.decode, V1_TRACE) if isinstance(r, Call)][:1]
    line = trace.as_line(call)
    assert line["plan"] and all(isinstance(pair, list) for pair in line["plan"])
    assert line == json.loads(records.encode(call)) and "to" not in line


def test_model_answer_lines_say_whether_the_answer_was_grounded() -> None:
    """`grounded`: a line from before the field reads as "not known" (None), never as "not in
    the email"; the broker writes the reader's finding, and leaves the field out when unknown."""
    old = [r for r in map(records.decode, V1_TRACE) if isinstance(r, records.ModelAnswer)]
    assert old and all(r.grounded is None for r in old)
    for grounded in (True, False):
        line = tracing.model_answer(Reading(message_id="m", answer="12345", source="model", grounded=grounded))
        assert json.loads(line)["grounded"] is grounded
        decoded = records.decode(line)
        assert isinstance(decoded, records.ModelAnswer) and decoded.grounded is grounded
    unknown = tracing.model_answer(Reading(message_id="m", answer="", source="none"))
    assert "grounded" not in json.loads(unknown)
