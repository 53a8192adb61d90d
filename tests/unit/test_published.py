"""What trace subscribers and the page see: an email about someone
else's order shows neither that customer's address nor the order's status, while the
data folder's trace.jsonl keeps the whole record for the operator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airlock import published, records
from airlock.wire import Hello, Passed, Reading, Submit
from broker.router import Router, Send
from dashboard.feed import Dedup, decode
from dashboard.state import Board
from dashboard.stream import Hub, Refused
from tests import lines as trace_lines
from tests.unit.test_router import sent_email

OWNER = "mallory@example.net"  # owns order 1234 in actor/orders.toml
STATUS = '"shipped"'  # that order's status, as JSON
SENDER = "lena@example.de"  # who asks about it
R, V, A, C = b"r", b"v", b"a", b"c"
SMTP = "smtp-public-key"  # the SMTP intake's key: the only one a sender proof is kept from


@pytest.fixture
def attack_lines(settings, make_actor) -> list[bytes]:
    """The trace lines the broker writes for a stranger asking about order 1234 under the
    guarded task: the real actor refuses the mail, the real router records it."""
    router = Router(settings, boot=0xABC, smtp_keys={SMTP})
    effects: list[Any] = []
    for role, identity in (("reader", R), ("validator", V), ("actor", A)):
        effects += router.handle(role, identity, Hello(credit=1), 0.0)
    effects += router.handle("intake", C, Submit(ref=1, raw=b"Order 1234?", format="text", sender=SENDER,
                                                    sender_proof="dkim"), 0.0, SMTP)
    (message_id,) = [sent_email(s).message_id for s in effects if isinstance(s, Send) and s.role == "reader"]
    effects += router.handle("reader", R, Reading(message_id=message_id, answer="1234", source="model"), 0.1)
    effects += router.handle("validator", V, Passed(message_id=message_id, value="1234"), 0.2)
    (passed,) = [s.message for s in effects if isinstance(s, Send) and s.role == "actor"]
    (done,) = make_actor("order_status_guarded.toml").handle(passed)
    assert done.outcome == "refused"
    effects += router.handle("actor", A, done, 0.3)
    return [line for effect in effects if isinstance(effect, bytes) for line in effect.splitlines()]


def test_the_file_keeps_the_whole_record(attack_lines) -> None:
    """The operator's trace.jsonl still holds the owner and the status (the lookup and the
    corroboration that read them): nothing is lost, it is only not published."""
    whole = b"\n".join(attack_lines).decode()
    assert OWNER in whole and STATUS in whole


def test_a_subscriber_never_sees_another_customers_address_or_status(attack_lines) -> None:
    """What the broker publishes for the stranger's email names no owner and no status;
    the flow (which rule refused, which tool ran, with which order id) is all there."""
    shown = [json.loads(published.line(line)) for line in attack_lines]
    text = json.dumps(shown)
    assert OWNER not in text and STATUS not in text
    assert SENDER in text  # the sender's own address is theirs to see
    refused = next(r for r in shown if r["event"] == "step" and r["decision"]["verdict"] == "refuse")
    assert refused["decision"]["refused_by"] == "corroboration" and refused["tool"] == "send_status"
    ran = next(r for r in shown if r["event"] == "step" and "status" in r)
    assert ran["args"] == {"order_id": "1234"} and set(ran["result"]) >= {"customer", "status"}
    assert next(r for r in shown if r["event"] == "outcome")["outcome"] == "refused"


def test_the_page_never_shows_another_customers_address_or_status(attack_lines) -> None:
    """Fed the whole lines (the page also tails trace.jsonl), no event a page receives and
    no snapshot holds the owner or the status; the card still shows the refusal."""
    hub = Hub(Board([("shop", "lookup_order"), ("mail", "send_status")]))
    subscribed = hub.subscribe()
    assert not isinstance(subscribed, Refused)
    page, _ = subscribed
    hub.publish([record for line in attack_lines for record in decode(line)])  # as the feed reads the file
    sent: list[str] = []
    while not page.queue.empty():
        item = page.queue.get_nowait()
        assert item is not None  # None would mean the stream ended
        sent.append(item[0])
    text = "".join(sent) + json.dumps(hub.snapshot())
    assert OWNER not in text and STATUS not in text
    (card,) = hub.snapshot()["cards"]
    assert card["outcome"] == "refused" and card["refusals"][0]["refused_by"] == "corroboration"


def test_published_and_file_lines_are_one_line_to_the_page(attack_lines) -> None:
    """The page deduplicates a published line and the same line from the file: made public
    first, both are the same bytes (public is idempotent)."""
    dedup = Dedup()
    for line in attack_lines:
        assert dedup.fresh(published.line(line))
        assert not dedup.fresh(published.line(published.line(line).rstrip(b"\n")))


def test_a_step_line_withholds_what_its_three_lines_did(attack_lines) -> None:
    """Privacy: a `step` line holds an observation's result and an authorization's decision;
    published, it withholds both as those lines did, and the page reads the same from the
    step line as from the three lines a previous version wrote for it."""
    steps = [line for line in attack_lines if b'"event":"step"' in line]
    assert len(steps) == 2 and any(OWNER.encode() in line for line in steps)
    for line in steps:
        shown = json.loads(published.line(line))
        assert OWNER not in json.dumps(shown) and STATUS not in json.dumps(shown)
        old = [raw.rstrip(b"\n") for raw in trace_lines.expanded(line)]
        assert decode(published.line(line)) == [part for raw in old for part in decode(published.line(raw))]
    ran = json.loads(published.line(steps[0]))
    assert set(ran["result"].values()) == {published.WITHHELD}
    assert published.line(published.line(steps[0]).rstrip(b"\n")) == published.line(steps[0])  # idempotent


def test_a_step_line_with_no_address_in_it_is_withheld_too() -> None:
    """A step line is never published as it is: a result or a fact read needs no `@` to be
    a customer's (an order's status)."""
    read = {"order.status": {"value": "shipped", "lineage": "order_store", "provenance": "shop/lookup_order"}}
    step = records.Step(at="t", message_id="m", stage="actor", step=2, server="mail", tool="send_status", key="m:2",
                        decision={"verdict": "refuse", "rules": [{"rule": "r", "read": read}]}, status="ok",
                        result={"status": "shipped"})
    line = records.encode(step)
    assert b"@" not in line and b"shipped" in line
    assert b"shipped" not in published.line(line)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("owner=jansen@example.nl (order_store)", "owner=(withheld) (order_store)", id="reason"),
    pytest.param("Jansen <jansen@example.nl>", "Jansen <(withheld)>", id="display-name"),
    pytest.param("order 4411", "order 4411", id="no-address"),
])
def test_masked_withholds_addresses_in_text(text: str, expected: str) -> None:
    """An address inside a reason or an argument is withheld; other text stays."""
    assert published.masked(text) == expected
