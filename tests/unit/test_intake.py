"""The SMTP intake's logic with no sockets: replies, origins, settings, the shared client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from airlock import settings as settings_module, task as task_module
from airlock.client import IntakeClient
from airlock.errors import BrokerUnreachable, SettingsError
from intake.app import (
    FRAME_HEADROOM_BYTES,
    UNAVAILABLE,
    BrokerSubmitter,
    Handler,
    data_size_limit,
    hand_over,
    load_smtp,
)
from reader import mail, prompt
from tests.unit.test_isolation import imported_top_levels

RAW = b"From: a@example.org\r\nSubject: order\r\n\r\nBestellung 4411 bitte.\r\n"  # as SMTP carries it
STORED = b"From: a@example.org\nSubject: order\n\nBestellung 4411 bitte.\n"  # as an .eml file holds it
TASK = task_module.load(Path(__file__).resolve().parents[2] / "tasks" / "order_status.toml")


class FakeSubmitter:
    """Records what it was given; answers with the next id, or raises if the broker is 'down'."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.submitted: list[tuple[bytes, str]] = []
        self.senders: list[str] = []
        self.proofs: list[str] = []

    def submit(self, raw: bytes, origin: str, sender: str = "", sender_proof: str = "none") -> str:
        if self.down:
            raise BrokerUnreachable("the broker at tcp://127.0.0.1:1 did not answer within 5.0 s")
        self.submitted.append((raw, origin))
        self.senders.append(sender)
        self.proofs.append(sender_proof)
        return f"m-{len(self.submitted)}"


def envelope(mail_from: str | None, raw: bytes = RAW) -> Envelope:
    made = Envelope()
    made.mail_from, made.rcpt_tos, made.original_content = mail_from, ["support@shop.example"], raw
    return made


async def deliver(handler: Handler, made: Envelope, session: Session | None = None) -> str:
    """aiosmtpd's DATA hook called as its server calls it, with no socket."""
    loop = asyncio.get_running_loop()
    return await handler.handle_DATA(SMTP(handler, loop=loop), session if session is not None else Session(loop), made)


def test_accepted_email_is_answered_250_with_its_message_id() -> None:
    """The broker's message id is in the 250 reply, so the sender can find it in the trace."""
    assert hand_over(FakeSubmitter(), RAW, "tester@example.org") == "250 Queued as m-1"


def test_unreachable_broker_is_answered_451_and_nothing_is_accepted() -> None:
    """No answer from the broker: a transient 451, never a 250, and nothing recorded as handed over."""
    submitter = FakeSubmitter(down=True)
    reply = hand_over(submitter, RAW, "tester@example.org")
    assert reply == UNAVAILABLE == "451 4.3.0 airlock broker unavailable, try again later"
    assert not reply.startswith("2") and "Queued" not in reply
    assert submitter.submitted == []


@pytest.mark.parametrize(("mail_from", "origin"), [
    pytest.param("tester@example.org", "smtp:tester@example.org", id="sender"),
    pytest.param("", "smtp:", id="null-sender"),
])
async def test_origin_carries_the_envelope_sender(mail_from: str, origin: str) -> None:
    """The email goes over with origin smtp:<envelope sender>; the sender is the From address,
    unverified without a signature: the envelope is the sender's claim."""
    submitter = FakeSubmitter()
    await deliver(Handler(submitter), envelope(mail_from))
    assert submitter.submitted == [(RAW, origin)]
    assert (submitter.senders, submitter.proofs) == (["a@example.org"], ["none"])


async def test_handle_data_submits_the_original_bytes_and_logs_one_line(capsys) -> None:
    """aiosmtpd's DATA hook hands over envelope.original_content as it came and prints one line."""
    submitter, session = FakeSubmitter(), Session(asyncio.get_running_loop())
    session.peer = ("127.0.0.1", 40000)  # type: ignore[assignment]  # aiosmtpd says str; it sets the peername tuple
    reply = await deliver(Handler(submitter), envelope("tester@example.org"), session)
    assert reply == "250 Queued as m-1"
    assert submitter.submitted == [(RAW, "smtp:tester@example.org")]
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("intake: 250 Queued as m-1 from=<tester@example.org>")


async def test_handle_data_with_broker_down_answers_451() -> None:
    """The DATA hook passes the 451 through: the sender keeps the email."""
    reply = await deliver(Handler(FakeSubmitter(down=True)), envelope(None))
    assert reply == UNAVAILABLE


@pytest.mark.parametrize(("wire", "stored"), [
    pytest.param(RAW, STORED, id="crlf"),
    pytest.param(b"From: a@b\r\nSubject: =?utf-8?q?Bestellung?=\r\n 4411\r\n\r\nOrder=\r\n 4411\r\n",
                 b"From: a@b\nSubject: =?utf-8?q?Bestellung?=\n 4411\n\nOrder=\n 4411\n", id="folded-and-soft-break"),
])
def test_crlf_and_lf_forms_make_one_prompt(wire: bytes, stored: bytes) -> None:
    """The intake keeps SMTP's CRLF; the reader makes the same prompt (and so finds the same
    recorded answer) as for the .eml file with LF line ends."""
    prompts = []
    for raw in (wire, stored):
        parsed = mail.parse(raw, "eml")
        assert isinstance(parsed, mail.ParsedEmail), parsed
        prompts.append(prompt.digest(prompt.for_email(TASK.reader, parsed)[0]))
    assert prompts[0] == prompts[1]


class FakeClient:
    def __init__(self, answers: list[str | Exception]) -> None:
        self.answers, self.closed, self.endpoint = answers, False, "tcp://127.0.0.1:1"

    def submit_one(self, item) -> str:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        self.closed = True


def test_submitter_replaces_its_client_after_the_broker_went_silent() -> None:
    """A client whose Submit went unanswered is closed, so it cannot deliver that Submit later."""
    waiting = iter([FakeClient([BrokerUnreachable("silent")]), FakeClient(["m-7"])])
    made: list[FakeClient] = []

    def connect() -> FakeClient:
        made.append(next(waiting))
        return made[-1]

    submitter = BrokerSubmitter(cast(Callable[[], IntakeClient], connect))  # a double: submit_one, close
    with pytest.raises(BrokerUnreachable):
        submitter.submit(RAW, "smtp:a@example.org")
    assert made[0].closed
    assert submitter.submit(RAW, "smtp:a@example.org") == "m-7"
    assert len(made) == 2 and not made[1].closed
    submitter.close()
    assert made[1].closed


def test_smtp_settings_default_to_loopback_2525() -> None:
    """With nothing set the intake listens on 127.0.0.1:2525."""
    smtp = load_smtp({})
    assert (smtp.host, smtp.port) == ("127.0.0.1", 2525)


@pytest.mark.parametrize("port", ["smtp", "0", "70000"])
def test_bad_smtp_port_names_the_key(port: str) -> None:
    """A port that does not cast fails with the key's name (main() turns it into exit 78)."""
    with pytest.raises(SettingsError, match="AIRLOCK_SMTP_PORT"):
        load_smtp({"AIRLOCK_SMTP_PORT": port})


def test_size_limit_is_the_size_kept_and_fits_one_frame() -> None:
    """DATA is capped at the email limit the broker keeps, and under a frame where that is smaller."""
    settings = settings_module.load({})
    assert data_size_limit(settings) == settings.max_email_bytes
    small_frames = settings_module.load({"AIRLOCK_MAX_FRAME_BYTES": str(FRAME_HEADROOM_BYTES + 1000)})
    assert data_size_limit(small_frames) == 1000
    with pytest.raises(SettingsError, match="AIRLOCK_MAX_FRAME_BYTES"):
        data_size_limit(settings_module.load({"AIRLOCK_MAX_FRAME_BYTES": str(FRAME_HEADROOM_BYTES)}))


def test_intake_imports_only_the_kernel_and_itself() -> None:
    """The intake is a client like `airlock inject`: no service code, so no tool code."""
    services = {"broker", "reader", "validator", "actor"}
    for module, names in imported_top_levels("intake").items():
        assert not names & services, f"{module} imports {sorted(names & services)}"


def test_submit_one_turns_a_socket_error_into_broker_unreachable(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client is the edge where ZeroMQ's errors become airlock's: the intake and the
    dashboard both see BrokerUnreachable (a 451, a 503), never a raw ZMQError."""
    import zmq

    from airlock.wire import Email

    def broken(messages) -> None:
        raise zmq.ZMQError(zmq.EHOSTUNREACH)

    with IntakeClient(settings, timeout_s=0.2) as client:
        monkeypatch.setattr(client._channel, "send_all", broken)
        with pytest.raises(BrokerUnreachable, match="failed"):
            client.submit_one(Email(RAW, "eml", "smtp:x"))
