"""The trace file: base fields win, torn lines heal, unfinished emails are found."""

from __future__ import annotations

import json
from pathlib import Path

from airlock import trace


def test_line_base_fields_cannot_be_overridden() -> None:
    """Details named like base fields never replace them."""
    record = json.loads(trace.line("reader", "model_answer", "m1", {"stage": "actor", "event": "x", "a": 1}))
    assert (record["stage"], record["event"], record["message_id"], record["a"]) == ("reader", "model_answer", "m1", 1)
    assert record["at"].endswith("Z")


def test_torn_last_line_is_ended_before_appending(tmp_path: Path) -> None:
    """A writer that died mid-line does not corrupt the next writer's first line."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(trace.line("broker", "received", "m1", {}) + b'{"at": "torn')
    writer = trace.TraceWriter(path)
    writer.write(trace.line("broker", "outcome", "m1", {"outcome": "failed"}))
    writer.close()
    assert [r["event"] for r in trace.read(path)] == ["received", "outcome"]


def test_unfinished_lists_received_without_outcome(tmp_path: Path) -> None:
    """Only ids with a received line and no outcome line are unfinished."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join([
        trace.line("broker", "received", "a", {}), trace.line("broker", "received", "b", {}),
        trace.line("broker", "outcome", "a", {"outcome": "completed"}), trace.line("broker", "started", None, {}),
    ]))
    assert trace.unfinished(path) == (["b"], [])


def test_escalated_emails_stay_open(tmp_path: Path) -> None:
    """An escalated outcome keeps the email open until a final outcome follows."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join([
        trace.line("broker", "received", "a", {}), trace.line("broker", "outcome", "a", {"outcome": "escalated"}),
        trace.line("broker", "received", "b", {}), trace.line("broker", "outcome", "b", {"outcome": "escalated"}),
        trace.line("broker", "outcome", "b", {"outcome": "completed"}),
    ]))
    assert trace.unfinished(path) == ([], ["a"])


def test_render_escapes_invisible_characters() -> None:
    """The readable form shows bidi and zero-width characters as escapes."""
    shown = trace.render(json.loads(trace.line("reader", "model_answer", "m", {"answer": "44\u202e11\u200b"})))
    assert "\u202e" not in shown and "\\u202e" in shown and "\\u200b" in shown


def test_render_escapes_every_part_a_peer_chose() -> None:
    """An event name (a Notice), a detail's key and value: none reaches the terminal raw."""
    from airlock.terminal import hidden

    record = {"at": "2026-11-30T10:00:00.000000Z", "message_id": "m-1\x1b[2J", "stage": "supervisor",
              "event": "restart\x1b]0;pwned\x07", "note\u202e": "charset \x1b]0;pwned\x07",
              "nested": {"reason": "a\u2066b"}}
    line = trace.render(record)
    assert not any(hidden(ch) for ch in line)
    assert "restart\\x1b]0;pwned\\x07" in line and "note\\u202e=" in line and "charset \\x1b]0;pwned\\x07" in line
    assert '{"reason":"a\\u2066b"}' in line
