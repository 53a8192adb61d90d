"""At the actor: only an authenticated sender corroborates an order's
owner, addresses are compared exactly, and the status mail goes to the order's owner."""

from __future__ import annotations

import pytest

from actor.preconditions import Fact, corroboration
from airlock import senders
from airlock.task import Precondition
from airlock.wire import Passed

OWNER, ORDER = "tom.baker@example.org", "772"  # actor/orders.toml
TWO = Precondition(rules=["corroboration"], corroborate=["sender", "order.customer"], min_sources=2)


def test_a_forged_sender_cannot_corroborate_on_the_guarded_task(make_actor, logged_calls) -> None:
    """The owner's address with no proof (a forged MAIL FROM or From:) is refused; nothing is sent."""
    actor = make_actor("order_status_guarded.toml")
    done = actor.run("m1", ORDER, OWNER)
    assert done.outcome == "refused", done.reason
    assert "unverified" in done.reason and done.calls[-1].decision["refused_by"] == "evidence"
    assert [c.tool for c in logged_calls()] == ["lookup_order"]


def test_the_authenticated_owner_is_answered_and_the_mail_goes_to_the_owner(make_actor, logged_calls) -> None:
    """The same email with a DKIM proof from the intake completes; calls.jsonl names the recipient."""
    actor = make_actor("order_status_guarded.toml")
    (done,) = actor.handle(Passed(message_id="m1", value=ORDER, sender=OWNER, sender_proof="dkim"))
    assert done.outcome == "completed", done.reason
    sent = logged_calls()[-1]
    assert (sent.tool, sent.args, sent.to) == ("send_status", {"order_id": ORDER}, OWNER)


def test_the_recipient_is_the_owner_never_the_requester(make_actor, logged_calls) -> None:
    """Unguarded, a stranger's order still mails its owner, not the person who asked."""
    actor = make_actor("order_status.toml")
    done = actor.run("m1", ORDER, "mallory@example.net")
    assert done.outcome == "completed"
    assert logged_calls()[-1].to == OWNER


def test_a_status_for_an_order_with_no_owner_is_a_failed_call(make_actor, logged_calls) -> None:
    """No owner in the store means nobody to write to: a typed failure, no mail, no guess."""
    done = make_actor("order_status.toml").run("m1", "13")  # no order 13 in actor/orders.toml
    assert done.outcome == "failed" and "no owner in the order store" in done.reason
    assert [c.tool for c in logged_calls()] == ["lookup_order"]


def test_an_unverified_fact_is_no_source_even_without_an_evidence_rule() -> None:
    """Corroboration alone (a student's guard) never counts an unverified sender."""
    facts = {"sender": Fact(OWNER, senders.UNVERIFIED, "From header"),
             "order.customer": Fact(OWNER, "order_store", "step 1")}
    assert corroboration(TWO, facts, None).verdict == "refuse"
    facts["sender"] = Fact(OWNER, senders.AUTHENTICATED, "intake (dkim)")
    assert corroboration(TWO, facts, None).verdict == "allow"


@pytest.mark.parametrize("claimed", [
    pytest.param("\u212aunde@example.de", id="kelvin-sign"),
    pytest.param("Kunde@example.de", id="local-part-case"),
])
def test_distinct_mailboxes_do_not_agree(claimed: str) -> None:
    """Casefolding merged these with kunde@example.de; the local part is compared exactly."""
    facts = {"sender": Fact(claimed, "intake", "intake (dkim)"),
             "order.customer": Fact("kunde@example.de", "order_store", "step 1")}
    assert corroboration(TWO, facts, None).verdict == "refuse"


def test_long_s_is_not_s() -> None:
    """ſ (U+017F) casefolds to s: two mailboxes, no agreement."""
    facts = {"sender": Fact("\u017fanne@example.nl", "intake", "intake (dkim)"),
             "order.customer": Fact("sanne@example.nl", "order_store", "step 1")}
    assert corroboration(TWO, facts, None).verdict == "refuse"


def test_the_domain_alone_is_case_insensitive() -> None:
    """DNS names ignore case: the same mailbox under an upper-case domain agrees."""
    facts = {"sender": Fact("kunde@EXAMPLE.De", "intake", "intake (dkim)"),
             "order.customer": Fact("kunde@example.de", "order_store", "step 1")}
    assert corroboration(TWO, facts, None).verdict == "allow"


@pytest.mark.parametrize(("address", "exact"), [
    ("Tom.Baker@Example.ORG", "Tom.Baker@example.org"),
    ("kunde@bücher.de", "kunde@xn--bcher-kva.de"),
    ("kunde@BÜCHER.de", "kunde@xn--bcher-kva.de"),
    ("\u017fam@example.org", "\u017fam@example.org"),
    ("kunde@examp\u212ae.org", None),  # IDNA would map the Kelvin sign to k: refused, not merged
    ("kunde@\u017f.org", None),
    ("no-domain@localhost", None),
    ("two@@example.org", None),
    ("spa ce@example.org", None),
    ("", None),
])
def test_normalized_lowercases_and_encodes_only_the_domain(address: str, exact: str | None) -> None:
    """One exact form per address; a spelling IDNA would change is no address at all."""
    assert senders.normalized(address) == exact


@pytest.mark.parametrize("proof", ["dkim", "none"])
def test_the_broker_carries_the_intakes_proof_to_the_actor(settings, proof: senders.SenderProof) -> None:
    """The proof the intake sent reaches the actor with the sender, whatever the validator's
    Passed says; a journalled email recovered after a restart keeps it."""
    from airlock.wire import Reading, Submit
    from broker.journal import QueuedEmail
    from broker.router import Router
    from tests.unit.test_router import CLIENT, R1, A, V, sends, workers

    for recovered in (False, True):
        router = Router(settings, boot=0xABC, smtp_keys={"smtp-public-key"})  # the SMTP intake's key
        if recovered:  # a restarted broker replays its journal before any worker says hello
            router.recover(QueuedEmail("abc-9", b"Order 772", "text", "x", OWNER, proof), 0.0)
            message_id = "abc-9"
            workers(router)
        else:
            workers(router)
            effects = router.handle("intake", CLIENT, Submit(ref=1, raw=b"Order 772", format="text", sender=OWNER,
                                                             sender_proof=proof), 0.0, "smtp-public-key")
            (entry,) = [e for e in effects if isinstance(e, QueuedEmail)]
            assert entry.sender_proof == proof
            message_id = entry.message_id
        router.handle("reader", R1, Reading(message_id=message_id, answer="772", source="model"), 1.0)
        forged = Passed(message_id=message_id, value="772", sender="x@evil.example", sender_proof="dkim")
        effects = router.handle("validator", V, forged, 2.0)
        (to_actor,) = sends(effects, "actor")
        assert to_actor.identity == A
        assert isinstance(to_actor.message, Passed)
        assert (to_actor.message.sender, to_actor.message.sender_proof) == (OWNER, proof)


def test_an_unverified_refund_request_waits_for_a_person(make_actor, logged_calls) -> None:
    """The refund task asks a person, not the sender's proof: an unverified sender escalates,
    and the decision record shows the lineage the approver decides on."""
    actor = make_actor("refund_with_approval.toml")
    done = actor.run("r1", "damaged", "lena@example.de")
    assert done.outcome == "escalated", done.reason
    (evidence,) = [r for r in done.calls[-1].decision["rules"] if r["rule"] == "evidence"]
    assert evidence["read"]["sender"]["lineage"] == senders.UNVERIFIED
    assert [c.tool for c in logged_calls()] == ["open_refund_case"]
