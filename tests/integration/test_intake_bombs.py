"""One sender's costly check does not hold another's reply: the SMTP intake's DATA hook with
several checks that never end (a key lookup that spins) and one ordinary signed email."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from harness.mail_signing import SigningKey, write_key_file
from intake.app import Handler
from intake.authentication import KeyFile, Verifier
from tests.integration.spinning import SpinningKeys
from tests.unit.test_intake import FakeSubmitter, deliver, envelope
from tests.unit.test_intake_authentication import HONEST, dkim_bomb

BUDGET_S = 2.0  # the test's time budget for one sender check
BOMBS = 6  # as many as delayed an ordinary sender by 200 s


async def test_an_ordinary_sender_is_answered_while_checks_over_budget_run(tmp_path: Path, capsys) -> None:
    """Six emails whose check spins, then an ordinary signed one: the ordinary one is answered
    250 with proof dkim within a second, and each spinning one ends at the budget as 250 with
    proof none, the reason naming the budget."""
    key = SigningKey.generate()
    write_key_file(tmp_path / "dkim.toml", {"example.org": key, "evil.example": key})
    keys = SpinningKeys(KeyFile.load(tmp_path / "dkim.toml").records)
    submitter = FakeSubmitter()
    handler = Handler(submitter, Verifier(keys), check_budget_s=BUDGET_S)
    bomb = dkim_bomb("evil.example", names=5, lines=20).replace(b"tom.baker@example.org", b"x@evil.example")
    bombs = [asyncio.create_task(deliver(handler, envelope("x@evil.example", bomb))) for _ in range(BOMBS)]
    await asyncio.sleep(0.2)  # the bombs' checks are running
    started = time.monotonic()
    reply = await asyncio.wait_for(deliver(handler, envelope("tom.baker@example.org",
                                                             key.sign(HONEST, "example.org"))), 30)
    answered_s = time.monotonic() - started
    assert reply.startswith("250") and answered_s < 1.0, (reply, answered_s)
    assert submitter.proofs == ["dkim"]
    replies = await asyncio.wait_for(asyncio.gather(*bombs), BUDGET_S + 10)
    assert all(r.startswith("250") for r in replies)
    assert submitter.proofs == ["dkim"] + ["none"] * BOMBS
    assert capsys.readouterr().out.count(f"ran over its budget of {BUDGET_S:g} s") == BOMBS
