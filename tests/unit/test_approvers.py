"""Who may decide an escalation: only a person, proven by their own
key; the intake's and the page's keys, which any service holding them could use, cannot.
Before, `by` was a string: any holder of the intake or page key approved "as dana"."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import zmq

from airlock import keys
from airlock.wire import Accepted, Decide, Decision, Done, Hello, Passed, Reading, Refused, Submit
from broker.router import Router, Send
from tests.unit.test_router import sent_email

DANA, SAM, INTAKE, PAGE = "dana-public-key", "sam-public-key", "intake-public-key", "page-public-key"
R, V, A, C = b"r", b"v", b"a", b"c"


@pytest.fixture
def escalated(settings) -> tuple[Router, str]:
    """A router with dana and sam as people, holding one email that waits for a decision."""
    router = Router(settings, boot=0xABC, approvers={DANA: "dana", SAM: "sam"})
    for role, identity in (("reader", R), ("validator", V), ("actor", A)):
        router.handle(role, identity, Hello(credit=1), 0.0)
    effects = router.handle("intake", C, Submit(ref=1, raw=b"refund", format="text"), 0.0, INTAKE)
    (message_id,) = [sent_email(s).message_id for s in effects if isinstance(s, Send) and s.role == "reader"]
    router.handle("reader", R, Reading(message_id=message_id, answer="damaged", source="model"), 0.1)
    router.handle("validator", V, Passed(message_id=message_id, value="damaged"), 0.2)
    router.handle("actor", A, Done(message_id=message_id, outcome="escalated", reason="needs a support-lead"), 0.3)
    return router, message_id


def decide(router: Router, message_id: str, key: str, by: str = "dana") -> list:
    return router.handle("intake", C, Decide(ref=7, message_id=message_id, approve=True, role="support-lead", by=by),
                         1.0, key)


@pytest.mark.parametrize("key", [pytest.param(INTAKE, id="intake-key"), pytest.param(PAGE, id="page-key"),
                                 pytest.param("", id="no-key")])
def test_a_service_key_cannot_decide_as_dana(escalated, key: str) -> None:
    """The intake's or the page's key sending "approve, by dana" is refused: nothing goes
    to the actor, the email still waits, and the trace records the refused attempt."""
    router, message_id = escalated
    effects = decide(router, message_id, key)
    (reply,) = [s.message for s in effects if isinstance(s, Send)]
    assert isinstance(reply, Refused) and "approver's own key" in reply.reason
    (line,) = [json.loads(e) for e in effects if isinstance(e, bytes)]
    assert line["event"] == "decision_refused" and line["claimed_by"] == "dana"
    assert router.flights[message_id].stage == "escalated"


def test_one_persons_key_cannot_decide_in_anothers_name(escalated) -> None:
    """Sam's key claiming to be dana is refused, naming whose key it is."""
    router, message_id = escalated
    (reply,) = [s.message for s in decide(router, message_id, SAM, by="dana") if isinstance(s, Send)]
    assert isinstance(reply, Refused) and reply.reason == "this key is sam's, not dana's"
    assert router.flights[message_id].stage == "escalated"


def test_danas_key_decides_and_the_record_names_her_key(escalated) -> None:
    """Dana's own key: accepted; the actor gets a Decision by dana carrying the key that
    proved it, and the broker's decision line names both."""
    router, message_id = escalated
    effects = decide(router, message_id, DANA)
    replies = [s for s in effects if isinstance(s, Send)]
    assert isinstance(replies[0].message, Accepted)
    assert replies[1].role == "actor" and replies[1].message == Decision(
        message_id=message_id, approve=True, role="support-lead", by="dana", key=DANA)
    (line,) = [json.loads(e) for e in effects if isinstance(e, bytes)]
    assert (line["event"], line["by"], line["key"]) == ("decision", "dana", DANA)


def test_a_persons_key_only_decides(escalated) -> None:
    """A person's key may not submit emails (or write notices): it is theirs to decide with."""
    router, _ = escalated
    effects = router.handle("intake", C, Submit(ref=2, raw=b"x", format="text"), 2.0, DANA)
    assert not [e for e in effects if isinstance(e, Send)]
    (line,) = [json.loads(e) for e in effects if isinstance(e, bytes)]
    assert line["event"] == "violation" and "dana's key may decide" in line["reason"]


def test_people_get_private_pairs_that_the_broker_maps_to_names(tmp_path: Path) -> None:
    """airlock keys --person: a pair per person (secret 0600, folder 0700), their public key
    in the broker's allow list, never in a service's folder; an existing pair is kept."""
    folder = tmp_path / "keys"
    keys.generate(folder)
    assert keys.make_people(folder, ["dana", "sam"]) == ["dana", "sam"]
    secret = folder / "people" / "dana.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((folder / "people").stat().st_mode) == 0o700
    dana = keys.load(folder, keys.person("dana"))
    assert keys.approvers(folder) == {dana.public.decode(): "dana",
                                      keys.load(folder, keys.person("sam"), secret=False).public.decode(): "sam"}
    assert (folder / "services" / "broker" / "allow" / "people" / "dana.key").is_file()
    services = folder / "services"
    assert not list(services.glob("*/people*")) and not list(services.rglob("dana.key_secret"))
    assert keys.make_people(folder, ["dana"]) == [] and keys.load(folder, keys.person("dana")) == dana
    with pytest.raises(keys.ConfigError, match="not key file names"):
        keys.make_people(folder, ["../broker"])
    assert zmq.auth.load_certificates(str(folder / "allow" / "people"))  # the form the authenticator loads


def test_airlock_keys_person_adds_people_without_touching_the_roles(tmp_path: Path, capsys) -> None:
    """`airlock keys --person dana` makes the roles and dana's pair; run again on that folder
    with --person erin, it adds erin and leaves every existing key as it was."""
    from cli import runtime as cli

    folder = tmp_path / "keys"
    assert cli.main(["keys", "--out", str(folder), "--person", "dana"]) == 0
    broker, dana = (folder / "broker.key_secret").read_bytes(), (folder / "people" / "dana.key_secret").read_bytes()
    assert cli.main(["keys", "--out", str(folder), "--person", "erin"]) == 0
    assert "erin" in capsys.readouterr().out
    assert (folder / "broker.key_secret").read_bytes() == broker
    assert (folder / "people" / "dana.key_secret").read_bytes() == dana
    assert sorted(keys.approvers(folder).values()) == ["dana", "erin"]
