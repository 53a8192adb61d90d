"""The board: trace records in, cards and counters out. Pure: no sockets, no files.

A card is one email as the page shows it. It sits in the column of the stage that holds
it now (received: reader; answered: validator; passed: actor) and, once it has an
outcome, in the column where it ended (the outcome's `ended_at`). Every text field is
passed through `airlock.trace.printable` line by line, so invisible and bidi characters
cannot hide or reorder what the room reads; the page still renders all of it as text.

A record changes a card only if its stage may say that event (HANDLERS, at the end).
Counters are totals over every record seen, not just the cards kept: `emails` counts
`received` lines, each outcome counts its own word (an escalated email that is later
approved counts in `escalated` and in `completed`), and `outside_plan` counts `call`
lines whose server/tool pair the plan does not name.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from airlock.trace import printable

EMAIL_LIMIT = 500  # cards kept in memory; the oldest finished one goes first
NAIVE_LIMIT = 100
SYSTEM_LIMIT = 30  # facts about no one email (broker started, service restarted...)
COLUMNS = ("reader", "validator", "actor")
OUTCOMES = ("completed", "rejected", "refused", "escalated", "failed")
EVENTS_PER_CARD = 64  # the timeline kept per card (stage and event of each trace line)
TEXT_LIMIT = 2000  # characters of any one text field a card carries


def shown(value: Any) -> str:
    """Text for a person: printable per line (newlines kept), capped in length."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    text = text[:TEXT_LIMIT]
    return "\n".join(printable(part) for part in text.split("\n"))


def shown_args(args: Any) -> dict[str, str]:
    if not isinstance(args, dict):
        return {}
    return {shown(key): shown(value) for key, value in list(args.items())[:20]}


class Board:
    def __init__(self, plan: Iterable[tuple[str, str]], limit: int = EMAIL_LIMIT) -> None:
        self.plan = [tuple(pair) for pair in plan]
        self._plan_pairs = set(self.plan)
        self.limit = limit
        self.cards: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.counters = {"emails": 0, **{name: 0 for name in OUTCOMES}, "outside_plan": 0}
        self.system: collections.deque[dict[str, str]] = collections.deque(maxlen=SYSTEM_LIMIT)
        self.naive: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._seq = 0

    def outside_plan(self, server: Any, tool: Any) -> bool:
        return (server, tool) not in self._plan_pairs

    # --- trace records ----------------------------------------------------------------------

    def apply(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """Fold one trace record in; return the card it changed (None: no card changed)."""
        message_id, event = record.get("message_id"), record.get("event")
        if not isinstance(event, str):
            return None
        if not isinstance(message_id, str):
            self.system.append({"at": shown(record.get("at")), "stage": shown(record.get("stage")),
                                "event": shown(event), "detail": _system_detail(record)})
            return None
        card = self._card(message_id, record)
        if len(card["events"]) < EVENTS_PER_CARD:
            card["events"].append({"at": shown(record.get("at")), "stage": shown(record.get("stage")),
                                   "event": shown(event)})
        handler = HANDLERS.get((record.get("stage"), event))
        if handler is not None:
            handler(self, card, record)
        self._seq += 1
        card["seq"] = self._seq
        return card

    def _card(self, message_id: str, record: dict[str, Any]) -> dict[str, Any]:
        card = self.cards.get(message_id)
        if card is None:
            card = self.cards[message_id] = {
                "id": shown(message_id), "at": shown(record.get("at")), "column": "reader", "origin": "",
                "subject": "", "sender": "", "excerpt": "", "answer": None, "source": None, "model_error": "",
                "unreadable": None, "verdict": None, "calls": [], "refusals": [], "decisions": [],
                "outcome": None, "reason": "", "rule": "", "final": False, "waiting": False, "seq": 0,
                "truncated": False, "events": [],
            }
            self._evict()
        return card

    def _evict(self) -> None:
        while len(self.cards) > self.limit:
            oldest = next((key for key, card in self.cards.items() if not card["waiting"]), None)
            self.cards.pop(oldest if oldest is not None else next(iter(self.cards)))

    def _on_received(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        self.counters["emails"] += 1
        card["origin"] = shown(record.get("origin"))

    def _on_model_answer(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        for key in ("subject", "sender", "excerpt", "answer", "model_error"):
            card[key] = shown(record.get(key))
        source = record.get("source")
        card["source"] = source if source in ("model", "recorded", "none") else "none"
        card["truncated"] = bool(record.get("truncated"))
        self._move(card, "validator")

    def _on_unreadable(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        for key in ("subject", "sender", "excerpt"):
            if record.get(key) is not None:
                card[key] = shown(record.get(key))
        card["unreadable"] = {"rule": shown(record.get("rule")), "reason": shown(record.get("reason"))}

    def _on_verdict(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        passed = record.get("verdict") == "passed"
        card["verdict"] = {"verdict": "passed" if passed else "rejected", "value": shown(record.get("value")),
                           "rule": shown(record.get("rule")), "reason": shown(record.get("reason"))}
        self._move(card, "actor" if passed else "validator")

    def _on_authorization(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        decision = record.get("decision") if isinstance(record.get("decision"), dict) else {}
        verdict = decision.get("verdict")
        if verdict in (None, "allow"):
            return
        card["refusals"].append({
            "step": record.get("step"), "server": shown(record.get("server")), "tool": shown(record.get("tool")),
            "verdict": shown(verdict), "reason": shown(decision.get("reason")),
            "refused_by": shown(decision.get("refused_by")), "escalated_to": shown(decision.get("escalated_to")),
        })

    def _on_call(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        outside = self.outside_plan(record.get("server"), record.get("tool"))
        if outside:
            self.counters["outside_plan"] += 1
        card["calls"].append({
            "step": record.get("step"), "server": shown(record.get("server")), "tool": shown(record.get("tool")),
            "args": shown_args(record.get("args")), "status": shown(record.get("status")),
            "error": shown(record.get("error")), "outside_plan": outside,
        })
        card["calls"].sort(key=lambda call: call["step"] if isinstance(call["step"], int) else 0)
        self._move(card, "actor")

    def _on_decision(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        card["decisions"].append({"approve": bool(record.get("approve")), "role": shown(record.get("role")),
                                  "by": shown(record.get("by"))})

    def _on_outcome(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        outcome = record.get("outcome")
        if outcome not in OUTCOMES:
            return
        self.counters[outcome] += 1
        card.update(outcome=outcome, reason=shown(record.get("reason")), rule=shown(record.get("rule")),
                    waiting=outcome == "escalated", final=outcome != "escalated")
        ended_at = record.get("ended_at")
        if ended_at in COLUMNS:
            card["column"] = ended_at

    def _move(self, card: dict[str, Any], column: str) -> None:
        if card["outcome"] is None and COLUMNS.index(column) >= COLUMNS.index(card["column"]):
            card["column"] = column

    # --- the naive pane ---------------------------------------------------------------------

    def naive_update(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Record the naive agent's run on one injected email, its calls marked against the plan."""
        calls = [{"step": call.get("step"), "server": shown(call.get("server")), "tool": shown(call.get("tool")),
                  "args": shown_args(call.get("args")),
                  "outside_plan": self.outside_plan(call.get("server"), call.get("tool"))}
                 for call in entry.get("calls") or [] if isinstance(call, dict)]
        shown_entry = {"id": shown(entry.get("id")), "label": shown(entry.get("label")),
                       "status": shown(entry.get("status")), "outcome": shown(entry.get("outcome")),
                       "reason": shown(entry.get("reason")), "answer": shown(entry.get("answer")),
                       "calls": calls, "outside_plan": sum(call["outside_plan"] for call in calls)}
        self.naive[shown_entry["id"]] = shown_entry
        self.naive.move_to_end(shown_entry["id"])
        while len(self.naive) > NAIVE_LIMIT:
            self.naive.popitem(last=False)
        return shown_entry

    # --- views ------------------------------------------------------------------------------

    def waiting(self) -> list[str]:
        return [card["id"] for card in self.cards.values() if card["waiting"]]

    def snapshot(self) -> dict[str, Any]:
        return {"cards": list(self.cards.values()), "counters": dict(self.counters),
                "plan": [f"{server}/{tool}" for server, tool in self.plan],
                "system": list(self.system), "naive_runs": list(self.naive.values())}


# Which stage may say what. The broker stamps `stage` from the endpoint a message came in
# on, and a worker's free-form Event keeps its own stage: so a reader (the part that reads
# hostile text) cannot put a call, a verdict or an outcome on the page, only reader facts.
HANDLERS = {
    ("broker", "received"): Board._on_received,
    ("reader", "model_answer"): Board._on_model_answer,
    ("reader", "unreadable"): Board._on_unreadable,
    ("validator", "verdict"): Board._on_verdict,
    ("actor", "authorization"): Board._on_authorization,
    ("actor", "call"): Board._on_call,
    ("broker", "decision"): Board._on_decision,
    ("broker", "outcome"): Board._on_outcome,
}


def _system_detail(record: dict[str, Any]) -> str:
    keys = ("service", "role", "exit_code", "endpoint", "kind", "reason", "in_flight")
    return shown(" ".join(f"{key}={record[key]}" for key in keys if key in record))
