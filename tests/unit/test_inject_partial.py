"""`airlock inject` that fails part way says what went in and what did not.

The broker here is a scripted channel standing in for the ZeroMQ one: it accepts the
first emails, then falls silent (a paused broker) or refuses "disk_full", so the CLI's own
code (cmd_inject, IntakeClient.submit_each) runs with no sockets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airlock import client as client_module, errors
from airlock.errors import DiskFull
from airlock.terminal import shown
from airlock.wire import Accepted, Message, Refused, Submit, frames, outbound_decoder
from cli import runtime as cli
from ops import injected
from tests.conftest import airlock_env

BIDI = "\u202e"


class ScriptedBroker:
    """A channel whose answer to the n-th Submit (0-based) is `answer(n, submit)`: a
    Message, or None for silence (that Submit is read and never answered)."""

    def __init__(self, answer: Callable[[int, Submit], Message | None], handshake: bool = True) -> None:
        self.answer, self.received, self.handshake = answer, 0, handshake
        self.outbox: list[Message] = []

    def send(self, message: Message) -> None:
        self.send_all([message])

    def send_all(self, messages: list[Message]) -> None:
        for message in messages:
            assert isinstance(message, Submit)
            reply = self.answer(self.received, message)
            self.received += 1
            if reply is not None:
                self.outbox.append(reply)

    def recv(self, timeout_s: float) -> bytes | None:
        if not self.outbox:
            return None
        replies, self.outbox = self.outbox, []
        [(_, frame)] = frames(replies)
        return frame

    def may_have_delivered(self) -> bool:
        return self.handshake  # as ZmqChannel: False only if the CURVE handshake never succeeded

    def close(self) -> None:
        pass


@pytest.fixture
def broker(tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[int, Submit], Message | None]], None]:
    """Make the CLI's IntakeClient talk to a ScriptedBroker (no keys, no sockets)."""
    for key, value in airlock_env(tmp_path / "data").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AIRLOCK_KEYS", raising=False)

    def install(answer: Callable[[int, Submit], Message | None], handshake: bool = True) -> None:
        real_init = client_module.IntakeClient.__init__

        def init(self, settings, timeout_s=5.0, role="intake", require_keys=False, busy_wait_s=None) -> None:
            real_init(self, settings, timeout_s, role, False, busy_wait_s)
            self._channel.close()
            self._channel = ScriptedBroker(answer, handshake)

        monkeypatch.setattr(client_module.IntakeClient, "__init__", init)

    return install


def emails(tmp_path: Path, count: int) -> list[Path]:
    folder = tmp_path / "mail"
    folder.mkdir()
    paths = [folder / f"{n:04}.eml" for n in range(count - 1)] + [folder / f"zz{BIDI}.eml"]
    for path in paths:
        path.write_bytes(b"Subject: order\n\nWhere is order 4411?\n")
    return paths


def accept_first(count: int, then: Callable[[Submit], Message | None]) -> Callable[[int, Submit], Message | None]:
    return lambda n, submit: Accepted(ref=submit.ref, message_id=f"m-{n}") if n < count else then(submit)


def test_a_silent_broker_part_way_prints_the_accepted_and_lists_the_rest(broker, tmp_path, capsys) -> None:
    """Accepted ids are printed though the broker then falls silent; the unsent are listed
    `not accepted` (and in --rest), the sent-but-unanswered `no answer`; exit 1."""
    paths = emails(tmp_path, 1200)  # past the client's window of 500: some are never sent
    broker(accept_first(300, lambda submit: None))
    rest = tmp_path / "rest.txt"
    code = cli.main(["inject", "--json", "--timeout", "0.05", "--rest", str(rest), str(tmp_path / "mail")])
    out, err = capsys.readouterr()
    assert code == 1
    lines = [json.loads(line) for line in out.splitlines()]
    accepted = [line for line in lines if "id" in line]
    assert [line["id"] for line in accepted] == [f"m-{n}" for n in range(300)]
    assert [line["file"] for line in accepted] == [str(p) for p in paths[:300]]
    no_answer = [line["file"] for line in lines if line.get("status") == "no_answer"]
    not_accepted = [line["file"] for line in lines if line.get("status") == "not_accepted"]
    assert no_answer and not_accepted
    assert sorted(no_answer + not_accepted) == sorted(str(p) for p in paths[300:])
    assert rest.read_text().splitlines() == not_accepted  # what a re-run may safely send
    failure, note = err.splitlines()  # with --json, the files are JSON lines, not stderr's
    assert note.endswith(f"--from-list {rest} sends only those")
    assert "did not answer" in failure and "300 of 1200 emails accepted; " in failure
    assert "sent with no answer" in failure
    assert BIDI not in out  # the file names are escaped in JSON too


def test_plain_output_lists_each_file_not_accepted_escaped(broker, tmp_path, capsys) -> None:
    """Without --json: after the failure and the counts, one escaped stderr line per file."""
    paths = emails(tmp_path, 1200)
    broker(accept_first(300, lambda submit: None))
    assert cli.main(["inject", "--timeout", "0.05", str(tmp_path / "mail")]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 300
    listed = err.splitlines()
    assert listed[0].startswith("airlock: the broker at ") and listed[1].startswith("airlock: 300 of 1200 ")
    files = [line.split(": ", 1) for line in listed[2:]]
    assert {status for status, _ in files} == {"not accepted", "no answer"} and len(files) == 900
    assert BIDI not in err and ["not accepted", str(paths[-1]).replace(BIDI, "\\u202e")] in files


def test_before_the_handshake_nothing_was_sent(broker, tmp_path, capsys) -> None:
    """A broker never reached (no CURVE handshake): nothing can have gone in, so no email
    is `no answer`; one stderr line says none was accepted, and --rest lists them all."""
    paths = emails(tmp_path, 3)
    broker(lambda n, submit: None, handshake=False)
    rest = tmp_path / "rest.txt"
    assert cli.main(["inject", "--timeout", "0.05", "--rest", str(rest), *map(str, paths)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[0].endswith("; none of the 3 emails was accepted")
    assert rest.read_text().splitlines() == [str(p) for p in paths]


def test_plain_output_prints_each_id_before_the_failure(broker, tmp_path, capsys) -> None:
    """Without --json too: one line per accepted email, then the failure on stderr."""
    emails(tmp_path, 10)
    broker(accept_first(4, lambda submit: None))
    assert cli.main(["inject", "--timeout", "0.05", str(tmp_path / "mail")]) == 1
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()] == [f"m-{n}" for n in range(4)]
    assert "4 of 10 emails accepted" in err and "Traceback" not in err


def test_disk_full_is_said_as_such_with_its_own_exit_code(broker, tmp_path, capsys) -> None:
    """The broker's Refused code disk_full: "not accepted: disk full", exit 74 (not 75,
    not "is airlock up running?"); the refused files are certainly not accepted."""
    paths = emails(tmp_path, 20)
    broker(accept_first(5, lambda submit: Refused(ref=submit.ref, reason="the journal: No space left on device",
                                                  code="disk_full")))
    rest = tmp_path / "rest.txt"
    code = cli.main(["inject", "--rest", str(rest), str(tmp_path / "mail")])
    out, err = capsys.readouterr()
    assert code == errors.EX_IOERR == 74
    assert len(out.splitlines()) == 5
    assert err.startswith("airlock: not accepted: disk full")
    assert "airlock up` running" not in err and "no answer: " not in err
    assert rest.read_text().splitlines() == [str(p) for p in paths[5:]]


def test_from_list_sends_exactly_the_files_listed(broker, tmp_path, capsys) -> None:
    """--from-list FILE injects the paths in FILE (what --rest wrote), one a line."""
    paths = emails(tmp_path, 6)
    listed = tmp_path / "rest.txt"
    listed.write_text(f"{paths[1]}\n\n{paths[4]}\n")
    sent: list[str] = []

    def answer(n: int, submit: Submit) -> Message:
        sent.append(submit.origin)
        return Accepted(ref=submit.ref, message_id=f"m-{n}")

    broker(answer)
    assert cli.main(["inject", "--from-list", str(listed)]) == 0
    assert sent == [str(paths[1]), str(paths[4])]
    assert cli.main(["inject", "--from-list", str(tmp_path / "missing.txt")]) == 2


def test_ctrl_c_between_two_acceptances_still_says_what_went_in(broker, tmp_path, capsys, monkeypatch) -> None:
    """Ctrl-C while an accepted id is being printed: that id is still printed, and the
    emails whose answers were never read are `no answer`, not lost; exit 130."""
    paths = emails(tmp_path, 10)
    broker(accept_first(10, lambda submit: None))
    real_line, calls = injected.accepted_line, []

    def interrupted_third(message_id: str, origin: str, as_json: bool) -> None:
        calls.append(message_id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real_line(message_id, origin, as_json)

    monkeypatch.setattr(injected, "accepted_line", interrupted_third)
    assert cli.main(["inject", str(tmp_path / "mail")]) == 130
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()] == ["m-0", "m-1", "m-2"]
    assert calls == ["m-0", "m-1", "m-2", "m-2"]  # the third again, on the way out
    assert "3 of 10 emails accepted; 0 not accepted, 7 sent with no answer" in err
    assert sorted(line.split(": ", 1)[1] for line in err.splitlines() if line.startswith("no answer: ")) == \
        [shown(str(p)) for p in paths[3:]]


def test_submit_each_reads_every_answer_after_a_refusal(broker, tmp_path) -> None:
    """After a refusal no new email is sent, but the answers already due are read: an
    email accepted after the refused one is still yielded, so it is never called lost."""
    from airlock import settings as settings_module
    from airlock.client import IntakeClient
    from airlock.wire import Email

    def answer(n: int, submit: Submit) -> Message:
        if n == 1:
            return Refused(ref=submit.ref, reason="full", code="disk_full")
        return Accepted(ref=submit.ref, message_id=f"m-{n}")

    broker(answer)
    items = [Email(b"x", "text", f"item-{n}") for n in range(3)]
    got: list[str] = []
    with IntakeClient(settings_module.load()) as client:
        with pytest.raises(DiskFull):
            for item, _ in client.submit_each(items):
                got.append(item.origin)
        assert client.unanswered == []
    assert got == ["item-0", "item-2"]


def test_the_scripted_broker_speaks_the_wire() -> None:
    """The double's frames decode as the broker's do (a test of the test)."""
    [(count, frame)] = frames([Accepted(ref=1, message_id="m-1"), Refused(ref=2, reason="r", code="disk_full")])
    assert count == 2
    assert outbound_decoder("intake").frame(frame) == [Accepted(ref=1, message_id="m-1"),
                                                       Refused(ref=2, reason="r", code="disk_full")]
