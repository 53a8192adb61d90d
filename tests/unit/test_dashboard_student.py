"""The live page marks a lab step that ran the student's code: the board carries the trace
line's `student` onto the verdict, call or refusal, and the page draws a badge for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dashboard.state import Board

ROOT = Path(__file__).resolve().parents[2]
PLAN = [("shop", "lookup_order"), ("mail", "send_status")]


def rec(event: str, stage: str = "broker", **detail: Any) -> dict[str, Any]:
    return {"at": "2026-11-30T10:00:00.000000Z", "message_id": "m-1", "stage": stage, "event": event, **detail}


def test_a_verdict_of_student_code_is_marked_on_its_card() -> None:
    """A verdict line with student=validator.check puts the plug point on the card's verdict."""
    board = Board(PLAN)
    board.apply(rec("received"))
    board.apply(rec("verdict", stage="validator", verdict="rejected", rule="student.not_narrow",
                    reason="your check() passed '٤٤١١'", student="validator.check"))
    assert board.cards["m-1"]["verdict"]["student"] == "validator.check"


def test_calls_and_refusals_of_student_code_are_marked_and_escaped() -> None:
    """A call or refusal line with `student` is marked; the value is escaped like all trace text."""
    board = Board(PLAN)
    board.apply(rec("received"))
    board.apply(rec("call", stage="actor", step=1, server="shop", tool="lookup_order", args={"number": "4411"},
                    status="ok", student="actor.select"))
    board.apply(rec("authorization", stage="actor", step=2, server="mail", tool="send_status",
                    decision={"verdict": "refuse", "reason": "student.missed"}, student="actor.checks\u202e"))
    card = board.cards["m-1"]
    assert card["calls"][0]["student"] == "actor.select"
    assert card["refusals"][0]["student"] == "actor.checks\\u202e"


def test_a_step_without_student_code_has_no_mark() -> None:
    """No `student` on the line, no mark on the card (as before labs)."""
    board = Board(PLAN)
    board.apply(rec("verdict", stage="validator", verdict="passed", value="4411"))
    board.apply(rec("call", stage="actor", step=1, server="shop", tool="lookup_order", args={}, status="ok"))
    card = board.cards["m-1"]
    assert "student" not in card["verdict"] and "student" not in card["calls"][0]


def test_the_page_draws_a_student_code_badge_for_each_kind_of_step() -> None:
    """app.js draws the badge on a verdict, a call and a refusal that carry `student`."""
    script = (ROOT / "dashboard/static/app.js").read_text()
    assert "'student code'" in script
    for holder in ("card.verdict.student", "call.student", "refusal.student"):
        assert f"studentBadge({holder})" in script, holder
    assert ".tag-student" in (ROOT / "dashboard/static/style.css").read_text()
