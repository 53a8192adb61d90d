"""What a trace line shows outside the data folder: the broker's published stream and the page.

Data: every trace line. Observations carry what a tool returned (an order's owner and
status); decision records carry the facts each rule read (the same owner, the sender); a
step line carries both (airlock.records.Step); reasons and arguments may quote an address.
Readers: every subscriber of the broker's trace endpoint, and every page the dashboard
serves (it also tails trace.jsonl, so it applies this to each line it takes).
Rationale: an email about someone else's order must not show that customer's address or
order status to whoever watches the page. The page needs the flow (events, verdicts,
which rule refused, which tool ran with which order id), not the data; the full record
stays in <data-dir>/trace.jsonl for the operator, who can read it there.

What is withheld, by event:
- observation and step: the tool's result values (its field names stay);
- authorization and step: the value of each fact a rule read (its lineage and provenance stay);
- any line: an email address inside a reason, an error or a call argument.
`public` is idempotent, so a published line and the same line read back from the file
look the same after it (the dashboard deduplicates on that).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

WITHHELD = "(withheld)"
# An email address inside text. It starts where a run of address characters starts (the
# lookbehind) and its local part never gives back (++): a long run with no address in it is
# read once, not once from each of its characters (which took 36 ms for 4,096 characters).
ADDRESS = re.compile(r"(?<![^\s@<>()\[\],;:=\"'])[^\s@<>()\[\],;:=\"']++@[^\s@<>()\[\],;:\"']+")
TEXT_FIELDS = ("reason", "error")
RESULT_EVENTS = ("observation", "step")  # lines whose `result` is what a tool returned
DECISION_EVENTS = ("authorization", "step")  # lines whose `decision` holds the facts rules read
_REDACTED_EVENTS = tuple(b'"event":"%s"' % event.encode() for event in sorted({*RESULT_EVENTS, *DECISION_EVENTS}))

_json = msgspec.json.Encoder()
_decode = msgspec.json.Decoder(dict[str, Any])


def masked(text: Any) -> Any:
    """`text` with every email address in it withheld; anything else as it is."""
    return ADDRESS.sub(WITHHELD, text) if isinstance(text, str) else text


def public(record: dict[str, Any]) -> dict[str, Any]:
    """The record as anyone outside the data folder may see it (a new dict; keys in order)."""
    shown = {key: masked(value) if key in TEXT_FIELDS else value for key, value in record.items()}
    event = record.get("event")
    if event in RESULT_EVENTS and isinstance(record.get("result"), dict):
        shown["result"] = dict.fromkeys(record["result"], WITHHELD)
    if isinstance(record.get("args"), dict):
        shown["args"] = {key: masked(value) for key, value in record["args"].items()}
    if event in DECISION_EVENTS and isinstance(record.get("decision"), dict):
        shown["decision"] = _decision(record["decision"])
    return shown


def _decision(decision: dict[str, Any]) -> dict[str, Any]:
    shown = {key: masked(value) if key == "reason" else value for key, value in decision.items()}
    rules = decision.get("rules")
    if isinstance(rules, list):
        shown["rules"] = [_rule(rule) if isinstance(rule, dict) else rule for rule in rules]
    return shown


def _rule(rule: dict[str, Any]) -> dict[str, Any]:
    shown = {key: masked(value) if key == "reason" else value for key, value in rule.items()}
    read = rule.get("read")
    if isinstance(read, dict):
        shown["read"] = {name: _fact(fact) for name, fact in read.items()}
    return shown


def _fact(fact: Any) -> Any:
    """A fact a rule read, without its value: {"lineage", "provenance"} say where it came
    from. An approval ({"approve", "role", "by"}) is who decided, not customer data."""
    if isinstance(fact, dict) and "value" in fact:
        return {key: WITHHELD if key == "value" else value for key, value in fact.items()}
    if isinstance(fact, dict):
        return {key: _fact(value) for key, value in fact.items()}
    if isinstance(fact, str):
        return masked(fact)
    return fact if not isinstance(fact, list) else [_fact(item) for item in fact]




def line(raw: bytes) -> bytes:
    """A trace line as it is published: `public` of it, one JSON object and a newline.
    A line with no address and no result or decision in it is published as it is (it
    would encode to the same bytes): most lines, kept cheap. A line that is not a JSON
    object (never written by the broker) is published as nothing."""
    if b"@" not in raw and not any(event in raw for event in _REDACTED_EVENTS):
        return raw
    try:
        record = _decode.decode(raw)
    except msgspec.DecodeError:
        return b""
    return _json.encode(public(record)) + b"\n"
