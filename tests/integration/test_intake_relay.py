"""A relay in front of `python -m intake`: its Authentication-Results count, a sender's own do not.

The relay is a small aiosmtpd server, as a border MTA: it verifies the DKIM signature itself,
removes every Authentication-Results header claiming its own authserv-id (RFC 8601, section
5), puts its own on top and forwards from its own loopback address (127.0.0.2), the one the
intake is told to trust. A sender connecting to the intake straight, from 127.0.0.1, writes
the same header itself.
"""

from __future__ import annotations

import re
import smtplib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dkim
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from harness.mail_signing import SigningKey, write_key_file
from intake.authentication import KeyFile
from tests.conftest import ROOT, free_ports
from tests.integration.conftest import wait_until
from tests.integration.test_smtp_intake import (
    SEED,
    intake as intake,  # a fixture, used here
    outcomes,
    queued_id,
    send,
)

RELAY_ID = "mx.shop.example"
RELAY_ADDRESS = "127.0.0.2"  # any 127.0.0.0/8 address is the loopback on Linux
SENDER = "kunde@example.de"
_THEIRS = re.compile(rb"Authentication-Results:[ \t]*" + re.escape(RELAY_ID.encode()) + rb"[ \t]*;[^\r\n]*\r\n"
                     rb"(?:[ \t][^\r\n]*\r\n)*", re.IGNORECASE)


class Relay:
    """The border MTA: verify, strip copies of its own id, add its own header, forward."""

    def __init__(self, keys: KeyFile, intake_port: int) -> None:
        self.keys, self.intake_port = keys, intake_port

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802  (aiosmtpd's name)
        raw = _THEIRS.sub(b"", envelope.original_content or b"")
        signers = [d for d in (b"example.de",) if re.search(rb"d=" + d, raw)]
        passed = bool(signers) and dkim.verify(raw, dnsfunc=self.keys)
        result = f"dkim=pass header.d={signers[0].decode()}" if passed else "dkim=none"
        stamped = f"Authentication-Results: {RELAY_ID}; {result}\r\n".encode() + raw
        with smtplib.SMTP("127.0.0.1", self.intake_port, timeout=30,
                          source_address=(RELAY_ADDRESS, 0)) as forward:
            forward.ehlo()
            forward.mail(envelope.mail_from or "")
            for rcpt in envelope.rcpt_tos:
                forward.rcpt(rcpt)
            code, reply = forward.data(stamped)
        return f"{code} {reply.decode()}"


@pytest.fixture
def relay() -> Iterator[type[Controller]]:
    started: list[Controller] = []

    def start(keys: KeyFile, intake_port: int) -> Controller:
        (port,) = free_ports(1)
        controller = Controller(Relay(keys, intake_port), hostname="127.0.0.1", port=port)
        controller.start()
        started.append(controller)
        return controller

    yield start  # type: ignore[misc]
    for one in started:
        one.stop()


def test_only_the_relays_own_header_proves_a_sender(stack, intake, relay, tmp_path: Path) -> None:
    """The same forged `Authentication-Results: mx.shop.example; dkim=pass` sent straight to
    the intake is unverified and refused on the guarded task; the owner's signed email sent
    through the relay is proven by the relay's header (proof authres: the intake has no DKIM
    keys of its own) and answered; an unsigned email through the relay, its sender's forged
    copy of the header removed, stays unverified."""
    key = SigningKey.generate()
    keys = KeyFile.load(write_key_file(tmp_path / "dkim.toml", {"example.de": key}))
    s = stack(task=str(ROOT / "tasks" / "order_status_guarded.toml")).start()
    port = intake(s.env, AIRLOCK_TRUSTED_AUTHSERV_IDS=RELAY_ID, AIRLOCK_TRUSTED_RELAYS=f"{RELAY_ADDRESS}/32").port
    through = relay(keys, port)
    forged_header = f"Authentication-Results: {RELAY_ID}; dkim=pass header.d=example.de\r\n".encode() + SEED
    straight = queued_id(*send(port, forged_header, mail_from=SENDER))
    relayed_forged = queued_id(*send(through.port, forged_header, mail_from=SENDER))
    relayed_signed = queued_id(*send(through.port, key.sign(SEED, "example.de"), mail_from=SENDER))
    assert wait_until(lambda: len(outcomes(s)) == 3, timeout_s=90), s.trace()
    results = {o["message_id"]: o for o in outcomes(s)}
    proofs = {m: s.trace(m, "received")[0]["sender_proof"] for m in (straight, relayed_forged, relayed_signed)}
    assert proofs == {straight: "none", relayed_forged: "none", relayed_signed: "authres"}
    assert results[straight]["outcome"] == "refused" and "unverified" in results[straight]["reason"]
    assert results[relayed_forged]["outcome"] == "refused"
    assert results[relayed_signed]["outcome"] == "completed", results[relayed_signed]
    assert [c["tool"] for c in s.calls(straight)] == ["lookup_order"]


@pytest.mark.parametrize(("env", "named"), [
    pytest.param({"AIRLOCK_TRUSTED_AUTHSERV_IDS": RELAY_ID}, "AIRLOCK_TRUSTED_RELAYS", id="id-without-relay"),
    pytest.param({"AIRLOCK_TRUSTED_RELAYS": RELAY_ADDRESS}, "AIRLOCK_TRUSTED_AUTHSERV_IDS", id="relay-without-id"),
])
def test_a_trusted_id_without_its_relay_is_said_at_start(env: dict[str, str], named: str) -> None:
    """`python -m intake` with only one of the two settings starts, its start line says no
    trusted relay, and one warning on stderr names the missing setting."""
    (port,) = free_ports(1)
    with subprocess.Popen([sys.executable, "-m", "intake"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env={
                              "PATH": "", "PYTHONPATH": str(ROOT), "AIRLOCK_SMTP_PORT": str(port),
                              "AIRLOCK_INSECURE": "1", **env}) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            started = process.stdout.readline()
            warned = process.stderr.readline()
        finally:
            process.kill()
    assert "listening on smtp://" in started and "no trusted relay" in started, started
    assert warned.startswith("intake: warning: ") and named in warned, warned
