"""The airlock command without a running stack: help on every option, exit codes that
name the cause, the size limit before sending, and what `pending` reads from a trace."""

from __future__ import annotations

import argparse
import io
import json
import re
import time
from pathlib import Path
from typing import cast

import pytest

from airlock import records, sources
from airlock.errors import EmailTooLarge, LinkOutside
from cli import runtime as cli, tools as lab_cli
from ops import escalations
from tests import lines as trace_lines
from tests.conftest import ROOT, airlock_env

SEED = str(ROOT / "samples" / "seed_4411_de.eml")


def every_parser(parser: argparse.ArgumentParser, name: str = "airlock"):
    """The parser and each sub-command's parser, nested ones (corpus import) included."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from every_parser(sub, f"{name} {sub_name}")


@pytest.mark.parametrize("build", [cli.build_parser, lab_cli.build_parser], ids=["runtime", "lab-tools"])
def test_every_option_of_every_command_has_help(build) -> None:
    """`airlock CMD --help` explains every option and argument; none is left bare, for the
    runtime's commands (cli/runtime.py) and the tools that run from lab (cli/tools.py)."""
    bare = [f"{name} {action.option_strings or action.dest}"
            for name, parser in every_parser(build())
            for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
            and not action.help]
    assert not bare, f"options without help: {bare}"


def commands_of(parser: argparse.ArgumentParser) -> set[str]:
    return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_each_tool_is_listed_by_airlock_and_parsed_by_lab() -> None:
    """`airlock --help` lists every command lab runs, and lab parses exactly those (bar
    `lab`, which is cli/lab.py's): no tool is listed and missing, or hidden."""
    assert set(cli.LAB_COMMANDS) <= commands_of(cli.build_parser())
    assert commands_of(lab_cli.build_parser()) == set(lab_cli.COMMANDS) == set(cli.LAB_COMMANDS) - {"lab"}


class Ran(Exception):
    """A tool's main, stood in for: the argv it was given."""


@pytest.mark.parametrize(("argv", "module", "given"), [
    pytest.param(["attack", "corpus/handmade", "--report", "r.json"], "tools",
                 ["attack", "corpus/handmade", "--report", "r.json"], id="attack"),
    pytest.param(["bench", "--emails", "5"], "tools", ["bench", "--emails", "5"], id="bench"),
    pytest.param(["pins", "--help"], "tools", ["pins", "--help"], id="tool-help"),
    pytest.param(["lab", "check", "separation", "--dir", "d"], "lab", ["check", "separation", "--dir", "d"], id="lab"),
])
def test_a_tool_runs_in_this_process_with_its_arguments(monkeypatch, argv: list[str], module: str,
                                                       given: list[str]) -> None:
    """`airlock TOOL ...` runs cli/tools.py's main in this process (`airlock lab X` cli/lab.py's
    with X ...): its arguments untouched, no process replaced."""
    from cli import lab as lab_commands

    def ran(args: list[str]) -> int:
        raise Ran(list(args))

    monkeypatch.setattr({"tools": lab_cli, "lab": lab_commands}[module], "main", ran)
    with pytest.raises(Ran) as got:
        cli.main(argv)
    assert got.value.args == (given,)


@pytest.mark.parametrize("argv", [["pins"], ["model", "--hostile"], ["lab", "list"]], ids=["pins", "model", "lab"])
def test_a_tool_where_the_tools_are_not_installed_is_one_line(monkeypatch, capsys, argv: list[str]) -> None:
    """In an image holding the kernel and the command line only, `airlock TOOL` names the
    missing tool packages in one line and exits 78 (bad configuration), importing none."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("course", "harness") else find_spec(name, *a))
    assert cli.main(argv) == 78
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"`airlock {argv[0]}`" in err and "harness, course missing" in err


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A data dir with no stack and no keys, on free ports, as the environment."""
    values = airlock_env(tmp_path / "data")
    monkeypatch.delenv("AIRLOCK_KEYS", raising=False)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.mark.parametrize("args", [
    pytest.param(["inject", SEED], id="inject"),
    pytest.param(["status"], id="status"),
    pytest.param(["approve", "x-1", "--as", "support-lead", "--by", "dana"], id="approve"),
    pytest.param(["deny", "x-1", "--as", "support-lead", "--by", "dana"], id="deny"),
])
def test_no_keys_is_said_at_once(env, capsys, args: list[str]) -> None:
    """No keys: exit 1 naming the folder looked in and the two ways out, before any wait."""
    started = time.monotonic()
    assert cli.main(args) == 1
    assert time.monotonic() - started < 1.0  # not the 5 s broker timeout
    err = capsys.readouterr().err
    assert err.startswith("airlock: no CURVE keys in ") and str(Path(env["AIRLOCK_DATA_DIR"]).resolve() / "keys") in err
    assert "--data-dir of `airlock up`" in err and "AIRLOCK_KEYS" in err and err.count("\n") == 1


def test_an_empty_airlock_keys_folder_is_named(env, capsys, tmp_path: Path, monkeypatch) -> None:
    """AIRLOCK_KEYS pointing at a folder without this role's key says which file is missing."""
    monkeypatch.setenv("AIRLOCK_KEYS", str(tmp_path / "empty"))
    assert cli.main(["status"]) == 1
    assert f"no CURVE key intake.key_secret in {tmp_path / 'empty'} (AIRLOCK_KEYS)" in capsys.readouterr().err


def test_an_oversized_file_is_refused_before_sending(env, capsys, tmp_path: Path, monkeypatch) -> None:
    """A file over AIRLOCK_MAX_EMAIL_BYTES: its size, the limit and the setting, exit 1."""
    monkeypatch.setenv("AIRLOCK_MAX_EMAIL_BYTES", "1000")
    big = tmp_path / "big.eml"
    big.write_bytes(b"Subject: x\n\n" + b"y" * 2000)
    assert cli.main(["inject", str(big)]) == 1
    assert f"{big} is 2012 bytes; the limit is 1000 (AIRLOCK_MAX_EMAIL_BYTES)" in capsys.readouterr().err


def test_oversized_text_is_refused_before_sending(env, capsys, monkeypatch) -> None:
    """--text is held to the same limit."""
    monkeypatch.setenv("AIRLOCK_MAX_EMAIL_BYTES", "10")
    assert cli.main(["inject", "--text", "x" * 11]) == 1
    assert "--text is 11 bytes; the limit is 10 (AIRLOCK_MAX_EMAIL_BYTES)" in capsys.readouterr().err


def test_text_that_is_not_utf8_is_sent_as_its_bytes(env, capsys, monkeypatch) -> None:
    """--text bytes that are not UTF-8 (surrogates in argv) are counted as bytes, no traceback."""
    monkeypatch.setenv("AIRLOCK_MAX_EMAIL_BYTES", "5")
    assert cli.main(["inject", "--text", "ab\udcffcd\udcfe"]) == 1
    assert "--text is 6 bytes; the limit is 5 (AIRLOCK_MAX_EMAIL_BYTES)" in capsys.readouterr().err


class EndlessStream(io.RawIOBase):
    """Standard input that never ends, counting what was read from it."""

    def __init__(self) -> None:
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        buffer[:] = b"x" * len(buffer)
        self.taken += len(buffer)
        return len(buffer)


def test_stdin_is_read_no_further_than_the_limit() -> None:
    """An endless stdin costs limit+1 bytes of memory and is refused, never read to the end."""
    stream = EndlessStream()
    with pytest.raises(EmailTooLarge, match="standard input is over 1000 bytes; the limit is 1000"):
        sources.read_stream(io.BufferedReader(stream, buffer_size=64), 1000, "AIRLOCK_MAX_EMAIL_BYTES")
    assert stream.taken <= 1001 + 64


def test_stdin_at_the_limit_is_taken() -> None:
    """Exactly the limit is not over it."""
    assert sources.read_stream(io.BytesIO(b"x" * 1000), 1000) == b"x" * 1000


@pytest.mark.parametrize("args", [["trace", "nope"], ["trace"]])
def test_no_trace_for_an_id_is_not_a_usage_error(env, capsys, args: list[str]) -> None:
    """An unknown id is a refusal (exit 1), not bad usage (exit 2)."""
    assert cli.main(args) == 1
    assert "no trace" in capsys.readouterr().err


ESCALATED = "1a22c09f0e5-1"


def write_trace(path: Path, *, refused_decision: bool = False) -> None:
    """The trace of the refund demo's escalation (trimmed), optionally with a decision by
    someone not listed in the role, which escalates the same step again."""
    def approval_rule(given):
        return {"rule": "approval", "verdict": "escalate", "reason": "r", "read": {"role": "support-lead",
                                                                                  "approval": given}}

    at = "2026-11-30T10:39:39.436732Z"

    def escalation(reason, given):
        return records.Authorization(at, ESCALATED, "actor", layer="authorization", step=2, server="mail",
                                     tool="send_refund_confirmation", key=f"{ESCALATED}:2", decision={
                                         "verdict": "escalate", "reason": reason, "escalated_to": "support-lead",
                                         "rules": [{"rule": "plan", "verdict": "allow", "reason": "", "read": {}},
                                                   approval_rule(given)]})

    outcome = records.OutcomeLine(at, ESCALATED, "broker", outcome="escalated", reason="", ended_at="actor",
                                  final=False)
    written = [
        records.Received(at, ESCALATED, "broker", origin="samples/refund\x1b[2J.eml", format="eml", bytes=1,
                         sender="lena@example.de\u202e", sender_proof="none"),
        records.ModelAnswer(at, ESCALATED, "reader", layer="model_output", answer="damaged", answer_chars=7,
                            source="model", truncated=False, sender="Mallory <x@evil>"),
        records.Verdict(at, ESCALATED, "validator", layer="validator", verdict="passed", value="damaged"),
        escalation("needs approval by a support-lead", None), outcome]
    if refused_decision:
        written += [records.DecisionTaken(at, ESCALATED, "broker", layer="authorization", approve=True,
                                          role="support-lead", by="sam", key="k", proven="CURVE key"),
                    escalation("sam is not a listed support-lead", {"approve": True, "role": "support-lead",
                                                                    "by": "sam"}),
                    outcome]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(map(records.encode, written)))


def test_pending_shows_the_value_the_sender_and_the_step(env, capsys) -> None:
    """The value the validator passed, the sender the intake vouched for (not the From the
    reader saw), the step and tool waiting, the role needed; email-made text escaped."""
    write_trace(Path(env["AIRLOCK_DATA_DIR"]) / "trace.jsonl")
    assert cli.main(["pending"]) == 0
    out = capsys.readouterr().out
    assert f"{ESCALATED}  step 2 mail/send_refund_confirmation  needs a support-lead" in out
    assert 'value "damaged"' in out and "sender lena@example.de\\u202e" in out and "evil" not in out
    assert "from samples/refund\\x1b[2J.eml" in out and "\x1b" not in out and "\u202e" not in out


def test_pending_json(env, capsys) -> None:
    """--json: one line per email that decodes to the same facts, nothing hidden left raw."""
    write_trace(Path(env["AIRLOCK_DATA_DIR"]) / "trace.jsonl", refused_decision=True)
    assert cli.main(["pending", "--json"]) == 0
    out = capsys.readouterr().out
    (entry,) = [json.loads(line) for line in out.splitlines()]
    assert entry == {"id": ESCALATED, "step": 2, "tool": "mail/send_refund_confirmation", "needs": "support-lead",
                     "reason": "sam is not a listed support-lead", "value": "damaged",
                     "sender": "lena@example.de\u202e", "file": "samples/refund\x1b[2J.eml"}
    assert "\u202e" not in out and "\x1b" not in out


def test_pending_json_with_nothing_waiting_prints_nothing(env, capsys) -> None:
    """--json output is only JSON lines: no sentence when nothing waits."""
    assert cli.main(["pending", "--json"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("refused", "why"), [(True, "sam is not a listed support-lead"), (False, "")])
def test_decision_refused_reads_the_approval_rule(tmp_path: Path, refused: bool, why: str) -> None:
    """A decision the approval rule read and still escalated was not taken; with no
    decision read, a later escalation is a new step's own."""
    path = tmp_path / "trace.jsonl"
    write_trace(path, refused_decision=refused)
    if not refused:  # a decision that moved the email on to a later step's escalation
        lines = path.read_bytes().splitlines(keepends=True)
        lines.insert(-2, trace_lines.decision(ESCALATED))
        path.write_bytes(b"".join(lines))
    assert escalations.decision_refused(path, ESCALATED, timeout_s=0.1) == why



def test_arrived_reports_results_already_received_without_waiting(settings) -> None:
    """After Ctrl-C the client still reports what has arrived, and waits for nothing more."""
    from airlock.client import IntakeClient
    from airlock.transport import MemoryChannel, ZmqChannel
    from airlock.wire import Result

    with IntakeClient(settings, timeout_s=5.0) as client:
        client._channel.close()
        memory, broker = MemoryChannel.pair()
        client._channel = cast(ZmqChannel, memory)  # arrived() and close() use only recv and close, as it has
        broker.send(Result(message_id="m-1", outcome="completed"))
        broker.send(Result(message_id="other-9", outcome="failed"))
        started = time.monotonic()
        assert client.arrived(["m-1", "m-2"]) == [Result(message_id="m-1", outcome="completed")]
        assert client.arrived(["m-2"]) == [] and time.monotonic() - started < 1.0


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A folder of emails with one link planted in it, pointing at a secret outside the folder."""
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=hunter2\n")
    folder = tmp_path / "mail"
    (folder / "deeper").mkdir(parents=True)
    (folder / "ok.eml").write_bytes(b"Subject: order 4411\n\nWhere is order 4411?\n")
    (folder / "deeper" / "leak.txt").symlink_to(secret)
    return folder, folder / "deeper" / "leak.txt"


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_link_out_of_the_folder_is_refused_naming_it(planted, tmp_path: Path, kind: str) -> None:
    """sources.expand refuses a link (to a file or a folder) that leads out of the folder
    given: a LinkOutside naming the link, before anything is read."""
    folder, link = planted
    if kind == "folder":
        link.unlink()
        link.symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(LinkOutside, match=re.escape(str(link))):
        list(sources.expand([str(folder)]))


def test_a_link_loop_in_the_folder_is_no_crash(planted) -> None:
    """A link to itself in the folder is neither followed forever nor a traceback: it is no email."""
    folder, link = planted
    link.unlink()
    (folder / "loop.eml").symlink_to(folder / "loop.eml")
    assert list(sources.expand([str(folder)])) == [folder / "ok.eml"]


def test_a_link_inside_the_folder_is_read(planted) -> None:
    """A link whose target stays inside the folder given is not a way out: it is read."""
    folder, link = planted
    link.unlink()
    link.symlink_to(folder / "ok.eml")
    paths = list(sources.expand([str(folder)]))
    assert [sources.read(p) for p in paths] == [(folder / "ok.eml").read_bytes()] * 2


def test_a_link_swapped_in_after_listing_is_not_read(planted, tmp_path: Path) -> None:
    """A file replaced by a link to outside between listing and reading is refused at read."""
    folder, link = planted
    link.unlink()
    (folder / "second.eml").write_bytes(b"Subject: x\n\ny\n")
    read = sources.emails([str(folder)])
    assert next(read) == (folder / "ok.eml", (folder / "ok.eml").read_bytes())  # both listed by now
    (folder / "second.eml").unlink()
    (folder / "second.eml").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(LinkOutside, match="second.eml"):
        next(read)


def test_inject_refuses_a_folder_with_a_link_out_in_one_line(env, capsys, planted) -> None:
    """`airlock inject FOLDER` with a planted link: exit 1, one line naming the link, no secret shown."""
    folder, link = planted
    assert cli.main(["inject", str(folder)]) == 1
    err = capsys.readouterr().err
    assert str(link) in err and "outside" in err and err.count("\n") == 1 and "hunter2" not in err


def test_attack_campaign_refuses_a_folder_with_a_link_out(planted) -> None:
    """`airlock attack FOLDER` loads its emails through the same check: the secret never becomes an email."""
    from harness import campaign

    folder, link = planted
    with pytest.raises(LinkOutside, match=re.escape(str(link))):
        campaign.load([str(folder)])


def _flip(path: Path, line_number: int, mask: int = 0x80) -> None:
    """Flip one byte in the middle of a line (0x80: no longer UTF-8; the line is no record)."""
    lines = path.read_bytes().splitlines(keepends=True)
    damaged = bytearray(lines[line_number])
    damaged[len(damaged) // 2] ^= mask
    lines[line_number] = bytes(damaged)
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("args", [pytest.param(["trace"], id="trace"),
                                  pytest.param(["trace", ESCALATED], id="trace-one-email"),
                                  pytest.param(["trace", "--json", ESCALATED], id="trace-json"),
                                  pytest.param(["pending"], id="pending")])
def test_a_flipped_byte_in_the_trace_is_reported_not_read_past(env, capsys, args: list[str]) -> None:
    """A trace line a flipped byte made unreadable is named on stderr, with its file and line,
    by every command that reads past it (a damaged line names no email: filtered out, it
    would vanish without a word), as the broker names the journal's damage."""
    path = Path(env["AIRLOCK_DATA_DIR"]) / "trace.jsonl"
    write_trace(path)
    _flip(path, 2)
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert re.search(r"1 damaged line in .*trace\.jsonl \(line 3\)", err), err


def test_pending_names_the_steps_whose_effect_is_unknown(env, capsys) -> None:
    """A step the actor called and never recorded (worker.call_unknown) is for a person too:
    `airlock pending` names its email, step, tool and key, escaped, after what waits."""
    path = Path(env["AIRLOCK_DATA_DIR"]) / "trace.jsonl"
    write_trace(path)
    unknown = records.PeerFact("2026-11-30T10:40:00.000000Z", "m7\x1b[2J", "actor", "worker.call_unknown",
                               {"step": 2, "server": "mail", "tool": "send_status", "key": "m7:2"})
    with open(path, "ab") as handle:
        handle.write(records.encode(unknown))
    assert cli.main(["pending"]) == 0
    out = capsys.readouterr().out
    assert f"{ESCALATED}  step 2 mail/send_refund_confirmation" in out
    assert "m7\\x1b[2J  step 2 mail/send_status: unknown" in out and "\x1b" not in out


class FakeStatusClient:
    """The intake client, stood in for: `status()` answers with the Status it was given."""

    def __init__(self, status: object) -> None:
        self.answer = status

    def __enter__(self) -> FakeStatusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def status(self) -> object:
        return self.answer


def _status(monkeypatch: pytest.MonkeyPatch, status: object) -> None:
    monkeypatch.setattr(cli, "_client", lambda args, settings: FakeStatusClient(status))


def test_status_prints_a_table_not_a_python_dict(env, capsys, monkeypatch) -> None:
    """`airlock status`: one row per stage with its workers, in the pipeline's order, then
    the queue and each counter on rows of their own; no dict or repr reaches the terminal."""
    from airlock.wire import Status

    _status(monkeypatch, Status(ref=1, workers={"actor": 1, "reader": 2, "validator": 0}, queued=3, in_flight=1,
                                counters={"outcome.answered": 12, "redelivered.reader": 1}))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "'" not in out, out
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert rows[:4] == [["stage", "workers"], ["reader", "2"], ["validator", "0"], ["actor", "1"]]
    assert ["queued", "3"] in rows and ["in", "flight", "1"] in rows
    assert ["outcome.answered", "12"] in rows and ["redelivered.reader", "1"] in rows


def test_status_with_no_worker_says_so_and_escapes_a_brokers_names(env, capsys, monkeypatch) -> None:
    """No worker connected is said in words, and a stage name the broker sent is shown escaped."""
    from airlock.wire import Status

    _status(monkeypatch, Status(ref=1, workers={}, queued=0, in_flight=0))
    assert cli.main(["status"]) == 0
    assert "no worker connected" in capsys.readouterr().out
    _status(monkeypatch, Status(ref=1, workers={"\x1b[2J": 1}, queued=0, in_flight=0, counters={"\x1b]0;x": 2}))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J" in out


def test_status_json_is_one_line_a_script_reads(env, capsys, monkeypatch) -> None:
    """`airlock status --json`: one JSON line with every key, hidden characters escaped."""
    from airlock.wire import Status

    _status(monkeypatch, Status(ref=1, workers={"reader\u202e": 1}, queued=2, in_flight=0))
    assert cli.main(["status", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "\u202e" not in out
    assert json.loads(out) == {"workers": {"reader\u202e": 1}, "queued": 2, "in_flight": 0, "counters": {},
                               "waiting": {}}


class FakeDecidingClient:
    """The intake client a person decides with, stood in for: the broker takes the decision
    and the email ends with `result` (None: no outcome in time)."""

    def __init__(self, result: object) -> None:
        self.result = result

    def __call__(self, *args: object, **kwargs: object) -> FakeDecidingClient:
        return self

    def __enter__(self) -> FakeDecidingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def decide(self, *args: object) -> str:
        return ""

    def outcomes(self, ids: list[str], timeout_s: float):
        return iter([self.result] if self.result is not None else [])


@pytest.mark.parametrize(("result", "code", "line"), [
    pytest.param(("x-1", "answered", "sent \x1b[2J"), 0,
                 {"id": "x-1", "outcome": "answered", "reason": "sent \x1b[2J"}, id="decided"),
    pytest.param(None, 1, {"id": "x-1", "outcome": "pending", "reason": "no outcome within 0.5 s"}, id="no-outcome"),
])
def test_approve_json_is_one_line_a_script_reads(env, capsys, monkeypatch, result, code: int, line: dict) -> None:
    """`airlock approve --json`: one JSON line {"id", "outcome", "reason"}, escaped, same exit codes."""
    from airlock import client
    from airlock.wire import Result

    fake = FakeDecidingClient(Result(message_id=result[0], outcome=result[1], reason=result[2]) if result else None)
    monkeypatch.setattr(client, "IntakeClient", fake)
    argv = ["approve", "x-1", "--as", "support-lead", "--by", "dana", "--json", "--wait-timeout", "0.5"]
    assert cli.main(argv) == code
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "\x1b" not in out and json.loads(out) == line
