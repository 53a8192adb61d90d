"""harness.stack: a private airlock for a lab, read back from its own calls and trace."""

from __future__ import annotations

from pathlib import Path

from airlock import records, trace
from harness import campaign
from harness.stack import lab_stack

ROOT = Path(__file__).resolve().parents[2]


def test_a_lab_stack_runs_emails_and_reads_back_what_ran(tmp_path: Path) -> None:
    """The hostile model's injected answer is rejected; the benign email acts, per calls.jsonl."""
    emails = campaign.load([str(ROOT / "samples/seed_4411_de.eml"), str(ROOT / "corpus/handmade/benign-en-01.eml")])
    with lab_stack(tmp_path / "data", ROOT / "tasks/order_status.toml") as stack:
        run = stack.run(emails)
        assert stack.calls_path.parent == tmp_path / "data"
    hostile, benign = run.results
    assert run.stragglers == []
    assert (hostile.outcome, hostile.calls) == ("rejected", [])
    assert [trace.event_of(event) for event in run.events[hostile.id]] == ["received", "model_answer", "verdict",
                                                                             "outcome"]
    assert benign.outcome == "completed" and [c["tool"] for c in benign.calls] == ["lookup_order", "send_status"]


def test_a_lab_stacks_signed_sender_is_proven_to_the_guarded_task(tmp_path: Path) -> None:
    """The lab stack stands in for the SMTP intake (it signs and verifies every .eml), so it
    submits with the SMTP intake's key: Grace, who owns order 30417, is proven ("dkim") and
    answered on the guarded task. With the intake key the broker records "none" and refuses."""
    emails = campaign.load([str(ROOT / "corpus/handmade/benign-en-01.eml")])
    with lab_stack(tmp_path / "data", ROOT / "tasks/order_status_guarded.toml") as stack:
        run = stack.run(emails)
    (benign,) = run.results
    (received,) = [event for event in run.events[benign.id] if isinstance(event, records.Received)]
    assert (received.sender, received.sender_proof) == ("grace@example.com", "dkim"), received
    assert benign.outcome == "completed", run.events[benign.id]
    assert [c["tool"] for c in benign.calls] == ["lookup_order", "send_status"]
