"""`python -m intake` as a real process: mail sent with smtplib reaches the broker, or gets 451/552."""

from __future__ import annotations

import signal
import smtplib
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import pytest

from airlock import settings as settings_module
from intake.app import data_size_limit
from tests.conftest import ROOT, free_ports
from tests.integration.conftest import wait_until

SEED_FILE = ROOT / "samples" / "seed_4411_de.eml"
# SMTP lines end in CRLF and smtplib sends bytes as they are, so the file's LF ends are converted
# here, as any mail client does.
SEED = SEED_FILE.read_bytes().replace(b"\n", b"\r\n")
SENDER = "tester@example.org"
STOP_TIMEOUT_S = 10


class Intake:
    """One `python -m intake` on a free loopback port, output kept for failure messages."""

    def __init__(self, env: Mapping[str, str], **extra_env: str) -> None:
        (self.port,) = free_ports(1)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "intake"], cwd=ROOT, text=True,
            env={**env, "PYTHONPATH": str(ROOT), "AIRLOCK_SMTP_PORT": str(self.port), **extra_env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.output = ""

    def wait_listening(self) -> Intake:
        listening = wait_until(lambda: self.process.poll() is not None or self._accepts())
        if not listening or self.process.poll() is not None:
            self.stop()
            raise AssertionError(f"intake did not listen on {self.port}:\n{self.output}")
        return self

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Signal it, then collect the output; closes both pipes. Returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            out, err = self.process.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        self.output += out + err
        return self.process.returncode


@pytest.fixture
def intake() -> Iterator[Callable[..., Intake]]:
    started: list[Intake] = []

    def start(env: Mapping[str, str], **extra_env: str) -> Intake:
        started.append(Intake(env, **extra_env))
        return started[-1].wait_listening()

    yield start
    for one in started:
        one.stop()


def send(port: int, raw: bytes, mail_from: str = SENDER) -> tuple[int, str]:
    """One SMTP transaction; the DATA reply, which sendmail() would not return."""
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.ehlo()
        smtp.mail(mail_from)
        smtp.rcpt("support@shop.example")
        code, reply = smtp.data(raw)
        return code, reply.decode()


def sendmail(port: int, raw: bytes) -> None:
    """As a mail client does it; smtplib raises SMTPDataError when DATA is not answered 250."""
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.sendmail(SENDER, ["support@shop.example"], raw)


def email_of(size: int) -> bytes:
    """An email of exactly `size` bytes on the wire, in lines SMTP allows (at most 1000 bytes)."""
    head = f"From: {SENDER}\r\nTo: support@shop.example\r\nSubject: big\r\n\r\n".encode()
    full, rest = divmod(size - len(head), 1000)
    body = (b"x" * 998 + b"\r\n") * full
    if rest == 1:  # no line is one byte long: split the last full line into 501 + 500 bytes
        body = body[:-1000] + b"x" * 499 + b"\r\n" + b"x" * 498 + b"\r\n"
    elif rest:
        body += b"y" * (rest - 2) + b"\r\n"
    raw = head + body
    assert len(raw) == size
    return raw


def outcomes(s) -> list[dict]:
    try:
        return s.trace(event="outcome")
    except ValueError:  # a line the broker is still writing
        return []


def queued_id(code: int, reply: str) -> str:
    assert code == 250 and reply.startswith("Queued as "), (code, reply)
    return reply.removeprefix("Queued as ")


def test_seed_email_over_smtp_completes_with_the_two_planned_calls(stack, intake) -> None:
    """The seed email sent with smtplib runs the plan once, with origin smtp:<sender>."""
    s = stack().start()
    message_id = queued_id(*send(intake(s.env).port, SEED))
    assert wait_until(lambda: len(outcomes(s)) == 1, timeout_s=60), s.trace()
    (outcome,) = outcomes(s)
    assert (outcome["message_id"], outcome["outcome"]) == (message_id, "completed")
    (received,) = s.trace(message_id, "received")
    assert received["origin"].startswith("smtp:") and received["origin"] == f"smtp:{SENDER}"
    assert received["format"] == "eml" and received["bytes"] == len(SEED)  # as it arrived, CRLF and all
    assert [(c["server"], c["tool"], c["args"]) for c in s.calls(message_id)] == [
        ("shop", "lookup_order", {"order_id": "4411"}), ("mail", "send_status", {"order_id": "4411"})]


def test_the_size_advertised_is_the_size_kept_and_larger_mail_is_refused_552(stack, intake) -> None:
    """EHLO's SIZE is AIRLOCK_MAX_EMAIL_BYTES; a 1.5 MB email is refused 552 at MAIL (SIZE=
    declared) or at DATA (not declared), never queued; the largest kept email is queued."""
    s = stack().start()
    port = intake(s.env).port
    kept = settings_module.load(s.env).max_email_bytes
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.ehlo()
        assert smtp.esmtp_features["size"] == str(kept)
    big = email_of(1_500_000)
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        sendmail(port, big)  # smtplib declares SIZE=, as most clients do
    assert refused.value.smtp_code == 552
    assert send(port, big) == (552, "Error: Too much mail data")  # no SIZE declared
    assert send(port, email_of(kept + 1)) == (552, "Error: Too much mail data")
    message_id = queued_id(*send(port, email_of(kept)))
    assert wait_until(lambda: len(outcomes(s)) == 1, timeout_s=60), s.trace()
    (outcome,) = outcomes(s)
    assert outcome["message_id"] == message_id and outcome.get("rule") != "intake.too_large", outcome
    assert [r["message_id"] for r in s.trace(event="received")] == [message_id]


def test_mail_over_a_frame_is_refused_552_and_never_submitted(stack, intake) -> None:
    """One byte over the DATA limit: 552 at MAIL if the client declares SIZE, else after DATA;
    the broker never sees it."""
    s = stack().start()
    port = intake(s.env).port
    oversize = email_of(data_size_limit(settings_module.load(s.env)) + 1)
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        sendmail(port, oversize)  # smtplib declares SIZE=, as most clients do
    assert refused.value.smtp_code == 552
    assert send(port, oversize) == (552, "Error: Too much mail data")  # no SIZE declared
    assert s.trace(event="received") == []


def test_broker_down_is_answered_451_then_retry_is_queued(stack, intake) -> None:
    """No broker: DATA gets 451 (nothing accepted); once the broker is up the retry gets 250."""
    s = stack()  # not started: nothing listens on its ports yet
    port = intake(s.env).port
    with pytest.raises(smtplib.SMTPDataError) as deferred:
        sendmail(port, SEED)
    assert deferred.value.smtp_code == 451
    assert deferred.value.smtp_error == b"4.3.0 airlock broker unavailable, try again later"
    s.start()
    message_id = queued_id(*send(port, SEED))
    assert wait_until(lambda: len(s.trace(message_id, "outcome")) == 1, timeout_s=60), s.trace()
    assert s.trace(message_id, "outcome")[0]["outcome"] == "completed"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_intake_stops_cleanly_on_a_signal_and_logs_each_message(stack, intake, signum: int) -> None:
    """SIGTERM or SIGINT ends `python -m intake` with 0; stdout has the start line and one line per message."""
    s = stack().start()
    running = intake(s.env)
    message_id = queued_id(*send(running.port, SEED))
    assert running.stop(signum) == 0, running.output
    lines = running.output.splitlines()
    assert lines[0].startswith(f"intake: listening on smtp://127.0.0.1:{running.port}")
    assert [line for line in lines[1:] if line.startswith("intake: 250")] == [
        line for line in lines[1:] if message_id in line]
    assert len(lines) == 2, running.output


@pytest.mark.parametrize("key", ["AIRLOCK_SMTP_PORT", "AIRLOCK_INTAKE_PORT"])
def test_bad_setting_is_one_line_and_exit_78(tmp_path, key: str) -> None:
    """A port that is not a port: one line on stderr naming the key, exit 78 (EX_CONFIG)."""
    done = subprocess.run([sys.executable, "-m", "intake"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "", "PYTHONPATH": str(ROOT), "AIRLOCK_SMTP_PORT": "2525", key: "smtp"},
                          timeout=30)
    assert done.returncode == 78
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("intake: ") and key in done.stderr


def test_envelope_sender_is_escaped_on_the_intake_console(stack, intake) -> None:
    """A MAIL FROM holding an ESC sequence and a bidi override is logged escaped."""
    s = stack().start()
    running = intake(s.env)
    evil = "eve\x1b\u202e\x07@example.org"
    with smtplib.SMTP("127.0.0.1", running.port, timeout=30) as smtp:
        smtp.ehlo()
        code, _ = smtp.mail(evil, ["SMTPUTF8"])
        if code == 250:
            smtp.rcpt("support@shop.example")
            code, _ = smtp.data(SEED)
    running.stop()
    assert "\x1b" not in running.output and "\u202e" not in running.output and "\x07" not in running.output
    assert code == 250, running.output  # the sender's words did reach the console, escaped
    assert "from=<eve\\x1b\\u202e\\x07@example.org>" in running.output


def test_a_refused_key_is_451_and_the_console_says_why(stack, intake, tmp_path) -> None:
    """The intake holding keys the broker does not know: the sender gets 451, the console
    names the refused key instead of leaving the trainer to guess."""
    from airlock import keys

    s = stack().start()
    keys.generate(tmp_path / "stale-keys")
    running = intake(s.env, AIRLOCK_KEYS=str(tmp_path / "stale-keys"))
    with pytest.raises(smtplib.SMTPDataError) as deferred:
        sendmail(running.port, SEED)
    assert deferred.value.smtp_code == 451
    running.stop()
    assert "refused this key" in running.output and str(tmp_path / "stale-keys") in running.output, running.output
    assert s.trace(event="received") == []


def test_only_a_signed_owner_is_answered_on_the_guarded_task(stack, intake, tmp_path) -> None:
    """End to end: the seed email with MAIL FROM and From: forged to the
    order's owner is refused (its sender is unverified); the same email signed by the
    owner's domain (key generated here, served to the intake from a key file) is answered,
    and the status mail goes to the owner from the order store."""
    from harness.mail_signing import SigningKey, write_key_file

    key = SigningKey.generate()
    keys = write_key_file(tmp_path / "dkim.toml", {"example.de": key})
    s = stack(task=str(ROOT / "tasks" / "order_status_guarded.toml")).start()
    port = intake(s.env, AIRLOCK_DKIM_KEYS=str(keys)).port
    forged = queued_id(*send(port, SEED, mail_from="kunde@example.de"))
    signed = queued_id(*send(port, key.sign(SEED, "example.de"), mail_from="kunde@example.de"))
    assert wait_until(lambda: len(outcomes(s)) == 2, timeout_s=60), s.trace()
    results = {o["message_id"]: o for o in outcomes(s)}
    assert results[forged]["outcome"] == "refused" and "unverified" in results[forged]["reason"]
    assert [c["tool"] for c in s.calls(forged)] == ["lookup_order"]
    assert results[signed]["outcome"] == "completed", results[signed]
    (mail,) = [c for c in s.calls(signed) if c["tool"] == "send_status"]
    assert (mail["args"], mail["to"]) == ({"order_id": "4411"}, "kunde@example.de")
    assert [r["sender_proof"] for r in (s.trace(forged, "received")[0], s.trace(signed, "received")[0])] == [
        "none", "dkim"]
