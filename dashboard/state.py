"""The board: trace records in, cards and counters out. Pure: no sockets, no files.

A card is one email as the page shows it. It sits in the column of the stage that holds
it now (received: reader; answered: validator; passed: actor) and, once it has an
outcome, in the column where it ended (the outcome's `ended_at`). Every text field is
passed through `airlock.terminal.shown` line by line, so invisible and bidi characters
cannot hide or reorder what the room reads; the page still renders all of it as text.

A record changes a card only if its stage may say that event (HANDLERS, at the end).
The counters are the one thing a trainer reads from across the room, so each counts
what it says, over every record seen (not just the cards kept):
- `emails` counts emails, once each (the broker's `received`, or the first outcome of an
  email whose `received` line came before the part of the trace the page read);
- each outcome counts the emails whose latest outcome it is: an email escalated three
  times and then approved is 1 completed and 0 escalated, so `escalated` is the emails
  waiting for a person now, and the outcome counters never add up past `emails`;
- `outside_plan` counts calls that ran outside the plan of the task that ran them (the
  plan each call line records; lines from actors older than that are judged against
  the page's own task), once per email and step: a replay (a redelivered or resumed step
  the call log answers without running it again) is not a new call and never counts;
- `ran_twice` counts steps that really ran more than once for one email (a second call
  line that is no replay, status ok or error: the tool was invoked again), once per email
  and step. The call log exists so this never happens; when it does, the repeat stays on
  the card, flagged `repeated`, and the page shows the counter in red.
The naive pane has counters of its own (`naive_counters`), over every run seen, each run
counted once, when the naive agent has answered it: `emails` given to the naive agent and
run, `calls` it made, and of those `outside_plan`, judged against the page's own plan.
An email's final outcome is final: a later or repeated line about it (a duplicate
outcome, a late answer, an observation, a replay) is kept on its timeline, marked late,
and changes nothing else. Only a call that really ran after the outcome (a late answer
from an actor given up on) is still a call: listed as late and, outside its plan, counted.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from airlock.terminal import hidden, shown as escaped

EMAIL_LIMIT = 500  # cards kept in memory; the oldest finished one goes first
OPEN_LIMIT = 200_000  # emails remembered as received or escalated, not yet final
FINISHED_LIMIT = 100_000  # final emails remembered, so a late line cannot count one again
COUNTED_LIMIT = 100_000  # (email, step) of outside-plan calls already counted
RAN_LIMIT = 100_000  # (email, step) of steps that really ran, so a second run is seen
RAN = ("ok", "error")  # call statuses that mean the tool was invoked (not refused, escalated, replayed, unknown)
NAIVE_LIMIT = 100
NAIVE_COUNTED_LIMIT = 100_000  # naive runs already counted, so a repeated entry counts once
SYSTEM_LIMIT = 30  # facts about no one email (broker started, service restarted...)
COLUMNS = ("reader", "validator", "actor")
OUTCOMES = ("completed", "rejected", "refused", "escalated", "failed")
WAITING = "escalated"  # the one outcome that is not final: it waits for a person
EVENTS_PER_CARD = 64  # the timeline kept per card (stage and event of each trace line)
TEXT_LIMIT = 2000  # characters of any one text field a card carries, counted as shown (escaped)
CUT_MARK = "[...]"  # ends a text cut at TEXT_LIMIT; ASCII, so an escaped text stays one byte a character


def shown(value: Any) -> str:
    """Text for a person: printable per line (newlines kept), at most TEXT_LIMIT characters
    as shown. The cap counts the escapes, not the characters that arrived: an invisible
    character is shown as up to ten, so a cap on what arrived let one field grow tenfold.
    A cut text ends with CUT_MARK, after a whole escape."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    text = text[:TEXT_LIMIT]
    if "\\" not in text and text.replace("\n", "").isprintable():
        return text  # the common case, checked in C: nothing to escape
    if _fitting(text, TEXT_LIMIT) == len(text):
        return _escaped_lines(text)
    return _escaped_lines(text[:_fitting(text, TEXT_LIMIT - len(CUT_MARK))]) + CUT_MARK


def _escaped_lines(text: str) -> str:
    return "\n".join(escaped(part) for part in text.split("\n"))


def _fitting(text: str, limit: int) -> int:
    """How many characters of `text` fit in `limit` characters once escaped (as
    airlock.terminal writes them: \\xNN, \\uNNNN, \\UNNNNNNNN). A backslash counts as two
    (it is doubled when an escape letter follows), so this never overshoots."""
    used = 0
    for count, ch in enumerate(text):
        used += _shown_length(ch)
        if used > limit:
            return count
    return len(text)


_BACKSLASH_SHOWN = 2  # at most: a backslash before an escape letter is doubled


def _shown_length(ch: str) -> int:
    if ch == "\\":
        return _BACKSLASH_SHOWN
    if ch == "\n" or not hidden(ch):
        return 1
    code = ord(ch)
    return 4 if code < 0x100 else 6 if code < 0x10000 else 10


def shown_args(args: Any) -> dict[str, str]:
    if not isinstance(args, dict):
        return {}
    return {shown(key): shown(value) for key, value in list(args.items())[:20]}


class Board:
    def __init__(self, plan: Iterable[tuple[str, str]], limit: int = EMAIL_LIMIT, task: str = "") -> None:
        self.plan = [(server, tool) for server, tool in plan]  # the page's own task: for lines that name none
        self.task = task
        self._plan_pairs = set(self.plan)
        self.limit = limit
        self.cards: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.counters = {"emails": 0, **dict.fromkeys(OUTCOMES, 0), "outside_plan": 0, "ran_twice": 0}
        self.system: collections.deque[dict[str, str]] = collections.deque(maxlen=SYSTEM_LIMIT)
        self.naive: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.naive_counters = {"emails": 0, "calls": 0, "outside_plan": 0}
        self._naive_counted: collections.OrderedDict[str, None] = collections.OrderedDict()
        # Where each email stands, for the counters: "open" or "escalated" while it may
        # still change, then only that it is finished. Both bounded, oldest forgotten first.
        self._open: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._counted: collections.OrderedDict[tuple[str, int | str], None] = collections.OrderedDict()
        # (email, step) -> how many times it really ran; bounded like the others.
        self._ran: collections.OrderedDict[tuple[str, int | str], int] = collections.OrderedDict()
        self._seq = 0

    def outside_plan(self, server: Any, tool: Any, recorded: list[Any] | None = None) -> bool:
        """Whether server/tool is not a pair of the plan a call line `recorded` (a JSON list
        of [server, tool] pairs), or of the page's own plan. A half that is not text names no
        planned tool, and an entry of the recorded plan that is not a pair matches nothing:
        outside, fail closed, and never a crash on a bad line."""
        if not (isinstance(server, str) and isinstance(tool, str)):
            return True
        if recorded is None:
            return (server, tool) not in self._plan_pairs
        return [server, tool] not in recorded

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
        stage = record.get("stage")
        handler = HANDLERS.get((stage, event)) if isinstance(stage, str) else None
        late = message_id in self._finished
        if late and message_id not in self.cards:
            if handler is Board._on_call:  # its card is gone, but a call that ran still counts
                self._judge_call(message_id, record)
                self._ran_again(message_id, record)
            return None  # no empty card for an email that has ended
        card = self._card(message_id, record)
        if len(card["events"]) < EVENTS_PER_CARD:
            card["events"].append({"at": shown(record.get("at")), "stage": shown(record.get("stage")),
                                   "event": shown(event), "late": late})
        if handler is not None and (not late or handler is Board._on_call):
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
                "truncated": False, "events": [], "task": "",
            }
            self._evict()
        return card

    def _evict(self) -> None:
        while len(self.cards) > self.limit:
            oldest = next((key for key, card in self.cards.items() if not card["waiting"]), None)
            self.cards.pop(oldest if oldest is not None else next(iter(self.cards)))

    def _see(self, message_id: str) -> None:
        """Count an email the first time a broker line names it."""
        if message_id in self._open or message_id in self._finished:
            return
        self.counters["emails"] += 1
        _remember(self._open, message_id, "open", OPEN_LIMIT)

    def _on_received(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        self._see(record["message_id"])
        card["origin"] = card["origin"] or shown(record.get("origin"))

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
                           "rule": shown(record.get("rule")), "reason": shown(record.get("reason")),
                           **_student(record)}
        self._move(card, "actor" if passed else "validator")

    def _on_authorization(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        recorded = record.get("decision")
        decision: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
        verdict = decision.get("verdict")
        if verdict in (None, "allow"):
            return
        card["refusals"].append({
            "step": record.get("step"), "server": shown(record.get("server")), "tool": shown(record.get("tool")),
            "verdict": shown(verdict), "reason": shown(decision.get("reason")),
            "refused_by": shown(decision.get("refused_by")), "escalated_to": shown(decision.get("escalated_to")),
            **_student(record),
        })

    def _plan_of(self, record: dict[str, Any]) -> list[Any] | None:
        """The plan the call ran under, as its line records it; None (the page's own) for a
        line from an actor that recorded none."""
        plan = record.get("plan")
        if plan is None or plan == []:
            return None
        return plan if isinstance(plan, list) else []  # a plan that is not a list admits no pair

    def _judge_call(self, message_id: str, record: dict[str, Any]) -> bool:
        """Whether this call is outside its plan; counted once per email and step, never for a replay."""
        outside = self.outside_plan(record.get("server"), record.get("tool"), self._plan_of(record))
        key = _step_key(message_id, record)
        if outside and record.get("status") != "replayed" and key not in self._counted:
            _remember(self._counted, key, None, COUNTED_LIMIT)
            self.counters["outside_plan"] += 1
        return outside

    def _ran_again(self, message_id: str, record: dict[str, Any]) -> bool:
        """Whether this call line is a second real run of its step for this email (invariant 4:
        a step runs at most once); counted under ran_twice once per email and step."""
        if record.get("status") not in RAN:
            return False
        key = _step_key(message_id, record)
        runs = self._ran.pop(key, 0) + 1  # popped, so it goes back at the end: forgotten last
        _remember(self._ran, key, runs, RAN_LIMIT)
        if runs == 2:
            self.counters["ran_twice"] += 1
        return runs > 1

    def _on_call(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        outside = self._judge_call(record["message_id"], record)
        repeated = self._ran_again(record["message_id"], record)
        replay = record.get("status") == "replayed"
        listed = next((i for i, call in enumerate(card["calls"]) if call["step"] == record.get("step")), None)
        if not repeated and listed is not None and (replay or card["calls"][listed]["status"] != "replayed"):
            return  # this step is on the card already: a replay adds nothing
        if replay and card["final"]:
            return  # a replay after the outcome changes nothing
        call = {
            "step": record.get("step"), "server": shown(record.get("server")), "tool": shown(record.get("tool")),
            "args": shown_args(record.get("args")), "status": shown(record.get("status")),
            "error": shown(record.get("error")), "outside_plan": outside, "late": card["final"],
            "repeated": repeated, **_student(record),
        }
        if listed is None or repeated:  # a second run is listed beside the first, never over it
            card["calls"].append(call)
        else:  # the step's own report, after the replay that stood in for it
            card["calls"][listed] = call
        card["calls"].sort(key=lambda call: call["step"] if isinstance(call["step"], int) else 0)
        if isinstance(record.get("task"), str):
            card["task"] = shown(record["task"])
        self._move(card, "actor")

    def _on_decision(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        card["decisions"].append({"approve": bool(record.get("approve")), "role": shown(record.get("role")),
                                  "by": shown(record.get("by"))})

    def _on_outcome(self, card: dict[str, Any], record: dict[str, Any]) -> None:
        outcome = record.get("outcome")
        if outcome not in OUTCOMES:
            return
        message_id = record["message_id"]
        self._see(message_id)
        if self._open.pop(message_id, None) == WAITING:
            self.counters[WAITING] -= 1  # it counts under its new outcome instead
        self.counters[outcome] += 1
        if outcome == WAITING:
            self._open[message_id] = WAITING
        else:
            _remember(self._finished, message_id, None, FINISHED_LIMIT)
        card.update(outcome=outcome, reason=shown(record.get("reason")), rule=shown(record.get("rule")),
                    waiting=outcome == WAITING, final=outcome != WAITING)
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
                  "outside_plan": self.outside_plan(call.get("server"), call.get("tool")),
                  "replayed": call.get("replayed") is True}  # its log held the step: it ran before, not now
                 for call in entry.get("calls") or [] if isinstance(call, dict)]
        made = [call for call in calls if not call["replayed"]]
        outside = sum(1 for call in made if call["outside_plan"])
        entry_id = shown(entry.get("id"))
        shown_entry = {"id": entry_id, "label": shown(entry.get("label")),
                       "status": shown(entry.get("status")), "outcome": shown(entry.get("outcome")),
                       "reason": shown(entry.get("reason")), "answer": shown(entry.get("answer")),
                       "calls": calls, "outside_plan": outside}
        if entry.get("status") == "done" and entry_id not in self._naive_counted:
            _remember(self._naive_counted, entry_id, None, NAIVE_COUNTED_LIMIT)
            self.naive_counters["emails"] += 1
            self.naive_counters["calls"] += len(made)
            self.naive_counters["outside_plan"] += outside
        self.naive[entry_id] = shown_entry
        self.naive.move_to_end(entry_id)
        while len(self.naive) > NAIVE_LIMIT:
            self.naive.popitem(last=False)
        return shown_entry

    # --- views ------------------------------------------------------------------------------

    def waiting(self) -> list[str]:
        return [card["id"] for card in self.cards.values() if card["waiting"]]

    def snapshot(self) -> dict[str, Any]:
        return {"cards": list(self.cards.values()), "counters": dict(self.counters),
                "naive_counters": dict(self.naive_counters), "task": shown(self.task),
                "plan": [f"{server}/{tool}" for server, tool in self.plan],
                "system": list(self.system), "naive_runs": list(self.naive.values())}


def _student(record: dict[str, Any]) -> dict[str, str]:
    """`student`: the lab plug point whose student code took this step (the trace line's
    `student`), so the page can mark it; absent when none did, as on every line before labs."""
    student = record.get("student")
    return {"student": shown(student)} if student else {}


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


def _remember(memory: collections.OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Keep key -> value; past `limit` entries the oldest is forgotten, so a long trace costs
    bounded memory (a forgotten email can at worst be judged again, never crash the page)."""
    memory[key] = value
    if len(memory) > limit:
        memory.popitem(last=False)


def _step_key(message_id: str, record: dict[str, Any]) -> tuple[str, int | str]:
    """(email, step) of a call line; a step that is not an int or text is keyed by its repr."""
    step = record.get("step")
    return message_id, step if isinstance(step, (int, str)) else repr(step)


def _system_detail(record: dict[str, Any]) -> str:
    keys = ("service", "role", "exit_code", "endpoint", "kind", "reason", "in_flight")
    return shown(" ".join(f"{key}={record[key]}" for key in keys if key in record))
