"""course.provenance on a recorded lab run's files: what the run's own stack wrote for its own emails
is clean; a line appended by anyone else, or an email the run did not send, is named.

tests/data/lab-run holds three emails of a `lab run separation` of the reference checker, as
its stack wrote them (origins made relative): 1a23bdc5fab-1 completed (two calls),
1a23bdc5fab-7 rejected by the validator (no step), 1a23bdc5fab-22 failed at step 2 (its tool
raised, so only step 1 has a call line)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from airlock.terminal import shown
from cli import lab as commands
from course import phased_run, provenance, run as lab_run
from course.graders import in_stack
from course.provenance import NOT_SENT, audit
from tests.conftest import ROOT

RECORDED = ROOT / "tests/data/lab-run"
COMPLETED, REJECTED, FAILED = "1a23bdc5fab-1", "1a23bdc5fab-7", "1a23bdc5fab-22"
SENT = (COMPLETED, REJECTED, FAILED)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recorded trace and calls.jsonl, to append to."""
    return (shutil.copyfile(RECORDED / "trace.jsonl", tmp_path / "trace.jsonl"),
            shutil.copyfile(RECORDED / "calls.jsonl", tmp_path / "calls.jsonl"))


def appended(path: Path, line: bytes) -> Path:
    with open(path, "ab") as handle:
        handle.write(line)
    return path


def call_line(message_id: str, step: int, tool: str = "lookup_order", args: dict[str, object] | None = None) -> bytes:
    server = "shop" if tool == "lookup_order" else "mail"
    record = {"event": "call", "at": "2026-12-03T12:23:50.000000Z", "message_id": message_id, "step": step,
              "server": server, "tool": tool, "args": args or {"order_id": "7788"}}
    return json.dumps(record).encode() + b"\n"


def recorded_line(path: Path, number: int) -> bytes:
    return path.read_bytes().splitlines(keepends=True)[number - 1]


def test_the_recorded_run_is_its_own() -> None:
    """Every record of the recorded run is accounted for: no finding."""
    found = audit(RECORDED / "trace.jsonl", RECORDED / "calls.jsonl", SENT, stopped=True)
    assert found.total == 0 and found.problems() == []


@pytest.mark.parametrize(("line", "why"), [
    pytest.param(b"not json at all\n", "a call line that does not decode", id="not-json"),
    pytest.param(b'{"event":"call","message_id":"1a23bdc5fab-1"}\n', "a call line that does not decode",
                 id="fields-missing"),
    pytest.param(call_line("1a23bdc5fab-999", 1), "a call for an email this run did not send", id="email-not-sent"),
    pytest.param(call_line(REJECTED, 1), "a call the trace has no allowed step that ran for", id="step-never-ran"),
    pytest.param(call_line(FAILED, 2, "send_status"), "a call the trace has no allowed step that ran for",
                 id="tool-raised"),
    pytest.param(call_line(COMPLETED, 3), "a call the trace has no allowed step that ran for", id="no-such-step"),
])
def test_a_foreign_call_line_is_named(files: tuple[Path, Path], line: bytes, why: str) -> None:
    """A line appended to calls.jsonl that the actor did not log for an allowed step that ran is named."""
    trace, calls = files
    appended(calls, line)
    found = audit(trace, calls, SENT, stopped=True)
    assert [(f.file, f.line, f.why) for f in found.found] == [("calls.jsonl", 4, why)]


def test_a_call_line_rewritten_with_other_arguments_is_named(files: tuple[Path, Path]) -> None:
    """A call line whose arguments differ from those of the step the trace says ran is named."""
    trace, calls = files
    calls.write_bytes(calls.read_bytes().replace(b'"order_id":"7788"}}', b'"order_id":"1"}}', 1))
    [finding] = audit(trace, calls, SENT, stopped=True).found
    assert (finding.line, finding.why) == (1, "a call the trace has no allowed step that ran for")
    assert finding.said == f"{COMPLETED} step 1 shop/lookup_order(order_id='1')"


def test_a_copy_of_a_real_call_line_is_a_second_call_for_its_step(files: tuple[Path, Path]) -> None:
    """A call line repeated word for word is named: one step, one call."""
    trace, calls = files
    appended(calls, recorded_line(calls, 1))
    [finding] = audit(trace, calls, SENT, stopped=True).found
    assert (finding.line, finding.why) == (4, "a second call line for one step")
    assert finding.said == f"{COMPLETED} step 1 shop/lookup_order(order_id='7788')"


def test_an_email_the_run_did_not_send_is_named_with_its_sender(files: tuple[Path, Path]) -> None:
    """An email in the trace that the run did not submit (as one injected with the run's key
    would be) is named with its id, sender, origin and claimed proof; its call lines too."""
    trace, calls = files
    found = audit(trace, calls, (COMPLETED, REJECTED), stopped=True)
    email, call = found.found
    assert (email.file, email.why) == ("trace", NOT_SENT)
    assert email.said == (f"{FAILED} from priya@example.co.uk via corpus/handmade/benign-en-35.eml "
                          "(sender proof dkim), 6 trace line(s) about it")
    assert (call.file, call.why) == ("calls.jsonl", "a call for an email this run did not send")


@pytest.mark.parametrize(("line", "why"), [
    pytest.param(b"{torn\n", "a trace line that is no record", id="torn"),
    pytest.param(b'{"event":"step","at":"2026-12-03T12:23:49Z","message_id":"1a23bdc5fab-1","stage":"broker",'
                 b'"step":3,"server":"shop","tool":"lookup_order","key":"k","decision":{"verdict":"allow"}}\n',
                 "a trace line that is no record", id="step-from-the-broker"),
    pytest.param(b'{"event":"proof_accepted","at":"2026-12-03T12:23:49Z","message_id":null,"stage":"broker"}\n',
                 "a trace line of an event this version does not know", id="unknown-event"),
    pytest.param(b'{"event":"received","at":"2026-12-03T12:23:49Z","message_id":"1a23bdc5fab-500","stage":"broker",'
                 b'"origin":"smtp","format":"eml","bytes":10,"sender":"ceo@example.com","sender_proof":"dkim"}\n',
                 NOT_SENT, id="received-not-sent"),
])
def test_a_foreign_trace_line_is_named(files: tuple[Path, Path], line: bytes, why: str) -> None:
    """A line appended to the trace that is no record, an event no stage of this version
    writes, or an email the run did not send, is named with its line."""
    trace, calls = files
    appended(trace, line)
    [finding] = audit(trace, calls, SENT, stopped=True).found
    assert (finding.file, finding.line, finding.why) == ("trace", 22, why)


@pytest.mark.parametrize(("number", "event"), [(5, "received"), (14, "final outcome")])
def test_a_second_receipt_or_final_outcome_for_one_email_is_named(files: tuple[Path, Path], number: int,
                                                                   event: str) -> None:
    """The broker writes one receipt and one final outcome per email: a copy of either is named."""
    trace, calls = files
    appended(trace, recorded_line(trace, number))
    [finding] = audit(trace, calls, SENT, stopped=True).found
    assert (finding.file, finding.line, finding.why) == ("trace", 22, f"a second {event} line for one email")


def test_an_unterminated_last_call_line_counts_once_the_stack_stopped(files: tuple[Path, Path]) -> None:
    """While the stack is up a last line with no newline may be being written; once it stopped it is foreign."""
    trace, calls = files
    appended(calls, call_line(COMPLETED, 1).rstrip(b"\n"))
    assert audit(trace, calls, SENT, stopped=False).total == 0
    assert [f.why for f in audit(trace, calls, SENT, stopped=True).found] == ["a second call line for one step"]


def test_findings_past_the_shown_ones_are_counted(files: tuple[Path, Path]) -> None:
    """Many foreign lines: the first few named, the rest counted, the total exact."""
    trace, calls = files
    for step in range(10, 40):
        appended(calls, call_line(COMPLETED, step))
    found = audit(trace, calls, SENT, stopped=True)
    assert found.total == 30 and len(found.found) == provenance.KEPT
    problems = found.problems()
    assert len(problems) == provenance.SHOWN + 1 and problems[-1] == "25 more record(s) this run did not write"


def recorded_report(trace: Path, calls: Path) -> lab_run.Report:
    """A lab run's report over the recorded files, for emails it did not send (none): every
    email in them is foreign."""
    report = lab_run.Report(lab="separation", model="hostile", plug="validator.check", data_dir=trace.parent,
                            trace_path=trace, calls_path=calls, page_url=None, emails=[])
    lab_run.audit(report, stopped=True)
    return report


def test_the_report_the_json_and_the_exit_code_say_not_clean(files: tuple[Path, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A run with foreign records: NOT CLEAN lines naming them, escaped; --json clean false with
    each finding; exit 1."""
    trace, calls = files
    calls.write_bytes(call_line("evil\x1b[2J\u202e", 1))
    report = recorded_report(trace, calls)
    assert report.totals["foreign_records"] == 4  # three emails, one call line
    lines = [shown(line) for line in lab_run.report_lines(report, keep=False)]
    assert f"NOT CLEAN: {NOT_SENT} (trace line 5): {COMPLETED} from petra@example.at" in "\n".join(lines)
    assert any("(calls.jsonl line 1): evil\\x1b[2J\\u202e step 1" in line for line in lines)
    assert not any("\x1b" in line or "\u202e" in line for line in lines)
    record = lab_run.report_record(report)
    assert record["clean"] is False and record["totals"]["foreign_records"] == 4
    assert record["foreign"][0] == {"file": "trace", "line": 5, "why": NOT_SENT,
                                    "said": report.foreign.found[0].said}
    args = argparse.Namespace(json=False, keep=False)
    assert commands._stopped(args, lab_run, report, None) == 1
    assert "NOT CLEAN: an email this run did not send" in capsys.readouterr().out


def test_records_found_after_a_kept_report_are_said_on_the_way_out(files: tuple[Path, Path],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--keep: what was found once the stack stopped, and not shown before, is printed; exit 1."""
    trace, calls = files
    report = recorded_report(trace, calls)
    assert commands._stopped(argparse.Namespace(json=False, keep=True), lab_run, report, []) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(report.problems) and out[0].startswith("NOT CLEAN (found once the stack stopped): ")


def test_a_phase_with_foreign_records_is_not_clean(files: tuple[Path, Path]) -> None:
    """A phased run names the phase whose files hold a record it cannot account for."""
    trace, calls = files
    phase = phased_run.PhaseReport(id="guarded", title="t", holds=True, data_dir=trace.parent, trace_path=trace,
                                   calls_path=calls, page_url=None, emails=[], stragglers=[], sent=list(SENT))
    phased = phased_run.PhasedReport(lab="red-and-blue", model="hostile", data_dir=trace.parent, phases=[phase])
    phase.audit(stopped=True)
    assert phased.problems == []
    appended(calls, call_line(REJECTED, 1))
    phase.audit(stopped=True)
    assert phased.problems == [f"guarded: a call the trace has no allowed step that ran for (calls.jsonl line 4): "
                               f"{REJECTED} step 1 shop/lookup_order(order_id='7788')"]
    assert phased_run.report_record(phased)["totals"]["foreign_records"] == {"guarded": 1}


def test_an_in_stack_checkpoint_fails_on_foreign_records(files: tuple[Path, Path]) -> None:
    """The actor labs' in-stack verdict names the email the run did not send."""
    trace, calls = files
    verdict = in_stack.foreign_records(audit(trace, calls, (COMPLETED, REJECTED), stopped=True))
    assert verdict.checkpoint == in_stack.CHECKPOINT
    assert f"{NOT_SENT} (trace line 15): {FAILED} from priya@example.co.uk" in verdict.message


def intent_line(message_id: str, step: int, tool: str = "lookup_order", args: dict[str, object] | None = None) -> bytes:
    return call_line(message_id, step, tool, args).replace(b'"event": "call"', b'"event": "intent"')


def test_intents_of_steps_that_ran_are_the_runs_own(files: tuple[Path, Path]) -> None:
    """The actor's intent lines (its claim before each call) for steps that ran are clean, a
    failed step's too (its tool raised: an intent and no call); any other intent is named."""
    trace, calls = files
    appended(calls, intent_line(COMPLETED, 1))
    appended(calls, intent_line(FAILED, 2, "send_status", {"order_id": "30"}))
    assert audit(trace, calls, SENT, stopped=True).total == 0
    for line in (intent_line(COMPLETED, 1), intent_line(REJECTED, 1), intent_line("1a23bdc5fab-999", 1)):
        appended(calls, line)
    assert [f.why for f in audit(trace, calls, SENT, stopped=True).found] == [
        "a second intent line for one step", "an intent the trace has no allowed step that ran for",
        "a call for an email this run did not send"]


def test_a_foreign_emails_intent_and_call_are_one_finding(files: tuple[Path, Path]) -> None:
    """An email the run did not send: its step's intent and its call line are one call, named
    once, so the findings shown leave room for the next foreign record."""
    trace, calls = files
    appended(calls, intent_line("1a23bdc5fab-999", 1))
    appended(calls, call_line("1a23bdc5fab-999", 1))
    appended(calls, call_line("1a23bdc5fab-999", 2))
    found = audit(trace, calls, SENT, stopped=True)
    assert [f.why for f in found.found] == ["a call for an email this run did not send"] * 2 and found.total == 2
