"""Who may vouch for a sender: only the SMTP intake, by its own key. The intake
endpoint also takes the CLI's and supervisor's key ("intake") and the page's ("dashboard"),
none of which checks a signature; before, any of them could send sender_proof="dkim" and
the actor took that sender as proven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airlock import keys
from airlock.senders import SenderProof
from airlock.wire import Hello, Passed, Reading, Submit
from broker.journal import QueuedEmail
from broker.router import Router, Send

SMTP, CLI, PAGE, DANA = "smtp-public-key", "intake-public-key", "page-public-key", "dana-public-key"
OWNER = "kunde@example.de"
R, V, A, C = b"r", b"v", b"a", b"c"


def to_the_actor(router: Router, key: str, proof: SenderProof = "dkim") -> tuple[Passed, list[dict]]:
    """Submit one email with `proof` from `key`, read and validate it: what the actor gets,
    and the trace lines of its Submit."""
    for role, identity in (("reader", R), ("validator", V), ("actor", A)):
        router.handle(role, identity, Hello(credit=1), 0.0)
    effects = router.handle("intake", C, Submit(ref=1, raw=b"Order 4411", format="text", sender=OWNER,
                                                sender_proof=proof), 0.0, key)
    (entry,) = [e for e in effects if isinstance(e, QueuedEmail)]
    submitted = [json.loads(e) for e in effects if isinstance(e, bytes)]
    router.handle("reader", R, Reading(message_id=entry.message_id, answer="4411", source="model"), 0.1)
    effects = router.handle("validator", V, Passed(message_id=entry.message_id, value="4411"), 0.2)
    (sent,) = [e for e in effects if isinstance(e, Send) and e.role == "actor"]
    assert isinstance(sent.message, Passed)
    assert entry.sender_proof == sent.message.sender_proof  # a restart recovers what the actor got
    return sent.message, submitted


@pytest.mark.parametrize("key", [
    pytest.param(CLI, id="cli-intake-key"),
    pytest.param(PAGE, id="dashboard-key"),
    pytest.param("", id="no-authentication"),
])
@pytest.mark.parametrize("proof", ["dkim", "authres"])
def test_a_proof_from_any_key_but_the_smtp_intakes_is_recorded_as_none(settings, key: str, proof: SenderProof) -> None:
    """A proof claimed with the CLI's or the page's key (or with none) reaches the actor as
    "none", so it cannot corroborate; the received line says "none" and a violation says why."""
    router = Router(settings, boot=0xABC, approvers={DANA: "dana"}, smtp_keys={SMTP})
    passed, submitted = to_the_actor(router, key, proof)
    assert (passed.sender, passed.sender_proof) == (OWNER, "none")
    (received,) = [line for line in submitted if line["event"] == "received"]
    assert received["sender_proof"] == "none"
    (violation,) = [line for line in submitted if line["event"] == "violation"]
    assert violation["message_id"] == passed.message_id and violation["kind"] == "sender_proof"
    assert f"claimed sender_proof '{proof}'" in violation["reason"] and "SMTP intake" in violation["reason"]
    assert router.counters["violation.intake"] == 1


@pytest.mark.parametrize("proof", ["dkim", "authres", "none"])
def test_the_smtp_intakes_key_keeps_its_proof(settings, proof: SenderProof) -> None:
    """From the SMTP intake's own key the proof stands, with no violation."""
    router = Router(settings, boot=0xABC, smtp_keys={SMTP})
    passed, submitted = to_the_actor(router, SMTP, proof)
    assert (passed.sender, passed.sender_proof) == (OWNER, proof)
    assert [line["event"] for line in submitted if line["event"] == "violation"] == []


def test_an_unproven_submit_from_the_cli_is_no_violation(settings) -> None:
    """`airlock inject` claims nothing: its email is simply unverified, nothing is flagged."""
    router = Router(settings, boot=0xABC, smtp_keys={SMTP})
    passed, submitted = to_the_actor(router, CLI, "none")
    assert passed.sender_proof == "none" and "violation" not in [line["event"] for line in submitted]


def test_the_smtp_intake_has_a_key_of_its_own(tmp_path: Path) -> None:
    """The smtp pair is made with the others, let in on the intake endpoint, mounted by the
    compose intake service alone, and named to the broker by keys.smtp_keys; the CLI's
    intake key and the page's are not the SMTP intake's."""
    folder = tmp_path / "keys"
    keys.generate(folder)
    smtp = keys.load(folder, keys.SMTP_ROLE)
    assert (folder / "allow" / "intake" / "smtp.key").read_bytes() == (folder / "smtp.key").read_bytes()
    assert {p.name for p in (folder / "services" / "intake").glob("*.key_secret")} == {"smtp.key_secret"}
    assert {p.name for p in (folder / "services" / "inject").glob("*.key_secret")} == {"intake.key_secret"}
    assert keys.smtp_keys(folder) == {smtp.public.decode()}
    assert keys.smtp_keys(folder / "services" / "broker") == {smtp.public.decode()}  # what the compose broker reads
    others = {keys.load(folder, role).public.decode() for role in ("intake", "dashboard")}
    assert not others & keys.smtp_keys(folder)


def older_folder(folder: Path) -> dict[str, bytes]:
    """A keys folder as made before the smtp role: its pair and derived copies removed.
    Returns every other role's key files, byte for byte."""
    keys.generate(folder)
    for path in [*folder.rglob("smtp.key"), *folder.rglob("smtp.key_secret")]:
        path.unlink()
    return {p.name: p.read_bytes() for p in folder.glob("*.key*")}


def test_ensure_adds_the_smtp_pair_to_an_older_folder(tmp_path: Path) -> None:
    """The compose lab's init on a folder from before this change: the smtp pair is added,
    no other key changes, and the intake service's folder gets it."""
    folder = tmp_path / "airlock-keys"
    before = older_folder(folder)
    assert keys.ensure(folder) == "kept, added smtp"
    after = {p.name: p.read_bytes() for p in folder.glob("*.key*")}
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"smtp.key", "smtp.key_secret"}
    assert (folder / "services" / "intake" / "smtp.key_secret").read_bytes() == after["smtp.key_secret"]
    assert keys.ensure(folder) == "kept"


def test_add_new_roles_refuses_half_a_smtp_pair(tmp_path: Path) -> None:
    """Half an smtp pair (an interrupted run) is refused, not replaced: its holder may use it."""
    folder = tmp_path / "k"
    older_folder(folder)
    (folder / "smtp.key").write_text("x")
    with pytest.raises(keys.IncompleteKeys, match="smtp.key_secret"):
        keys.ensure(folder)
    assert (folder / "smtp.key").read_text() == "x"
