"""The trace file: base fields win, torn lines heal, unfinished emails are found."""

from __future__ import annotations

import json
from pathlib import Path

from airlock import records, trace
from tests import lines as trace_lines
from tests.lines import raw_line


def test_line_base_fields_cannot_be_overridden() -> None:
    """A peer's detail keys named like base fields never replace them (typed records have
    no free keys at all; a peer's fact is the one line written from a free detail)."""
    fact = records.PeerFact(records.utc_now(), "m1", "reader", "worker.note",
                            {"stage": "broker", "event": "outcome", "message_id": "m2", "a": 1})
    record = json.loads(records.encode(fact))
    assert (record["stage"], record["event"], record["message_id"], record["a"]) == ("reader", "worker.note", "m1", 1)
    assert record["at"].endswith("Z")


def test_torn_last_line_is_ended_before_appending(tmp_path: Path) -> None:
    """A writer that died mid-line does not corrupt the next writer's first line."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(trace_lines.received("m1") + b'{"at": "torn')
    writer = trace.TraceWriter(path)
    writer.write(trace_lines.outcome("m1", "failed"))
    writer.close()
    assert [trace.event_of(r) for r in trace.read(path)] == ["received", "outcome"]  # the torn line cut off


def test_unfinished_lists_received_without_outcome(tmp_path: Path) -> None:
    """Only ids with a received line and no outcome line are unfinished."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join([
        raw_line("broker", "received", "a", {}), raw_line("broker", "received", "b", {}),
        raw_line("broker", "outcome", "a", {"outcome": "completed"}), raw_line("broker", "started", None, {}),
    ]))
    assert trace.unfinished(path) == (["b"], [])


def test_escalated_emails_stay_open(tmp_path: Path) -> None:
    """An escalated outcome keeps the email open until a final outcome follows."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join([
        raw_line("broker", "received", "a", {}), raw_line("broker", "outcome", "a", {"outcome": "escalated"}),
        raw_line("broker", "received", "b", {}), raw_line("broker", "outcome", "b", {"outcome": "escalated"}),
        raw_line("broker", "outcome", "b", {"outcome": "completed"}),
    ]))
    assert trace.unfinished(path) == ([], ["a"])


def test_render_escapes_invisible_characters() -> None:
    """The readable form shows bidi and zero-width characters as escapes."""
    shown = trace.render(records.decode(trace_lines.model_answer("m", "44\u202e11\u200b")))
    assert "\u202e" not in shown and "\\u202e" in shown and "\\u200b" in shown


def test_render_escapes_every_part_a_peer_chose() -> None:
    """An event name (a Notice), a detail's key and value: none reaches the terminal raw."""
    from airlock.terminal import hidden

    record = records.PeerFact("2026-11-30T10:00:00.000000Z", "m-1\x1b[2J", "supervisor", "restart\x1b]0;pwned\x07",
                              {"note\u202e": "charset \x1b]0;pwned\x07", "nested": {"reason": "a\u2066b"}})
    line = trace.render(record)
    assert not any(hidden(ch) for ch in line)
    assert "restart\\x1b]0;pwned\\x07" in line and "note\\u202e=" in line and "charset \\x1b]0;pwned\\x07" in line
    assert '{"reason":"a\\u2066b"}' in line
