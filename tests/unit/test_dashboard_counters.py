"""The page's counters, which a trainer reads from across the room and which must never
lie: each call judged against the plan of the task that ran it, replays never counted again,
each email counted once under its latest outcome, and nothing changed after a final one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from airlock import settings as settings_module
from airlock.wire import Accepted, Decide, Heartbeat, Hello, Passed, Reading, Submit
from broker.router import Router, Send
from dashboard.feed import decode
from dashboard.state import OUTCOMES, Board
from tests.unit.test_dashboard import PLAN, rec


class Lab:
    """A broker's Router and a real actor for one task, wired with no sockets: the test
    gives each email's reader and validator answers; the actor runs the task's own plan,
    and its Done goes back through the Router, which writes the trace lines as in a run;
    `lines` holds them as the page's feed decodes them (a step line as its three records)."""

    def __init__(self, settings: settings_module.Settings, actor: Any, boot: int) -> None:
        # Each person decides with their own key: "<name>-key" here.
        people = {f"{name}-key": name for name in ("dana", "sam")}
        self.router, self.actor, self.now = Router(settings, boot=boot, approvers=people), actor, 0.0
        self.lines: list[dict[str, Any]] = []
        self.actor_identity = b"a"
        self.lose_actor_replies = 0  # the next replies the actor "sends" are lost (it died before)
        self._ref = 0
        self._hello()

    def _hello(self) -> None:
        for role, identity in (("reader", b"r"), ("validator", b"v"), ("actor", self.actor_identity)):
            self.run(self.router.handle(role, identity, Hello(credit=8), self.now))

    def run(self, effects: list[Any]) -> list[Any]:
        """Write the trace lines; hand what goes to the actor to the actor, and its answers back."""
        queue, seen = list(effects), list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, bytes):
                self.lines += decode(effect)
            elif isinstance(effect, Send) and effect.role == "actor" and not isinstance(effect.message, Heartbeat):
                for reply in self.actor.handle(effect.message):
                    if self.lose_actor_replies:
                        self.lose_actor_replies -= 1
                        continue
                    more = self.router.handle("actor", self.actor_identity, reply, self.now)
                    queue += more
                    seen += more
        return seen

    def email(self, value: str, sender: str = "lena@example.de") -> str:
        self._ref += 1
        self.now += 1.0
        effects = self.run(self.router.handle("intake", b"c", Submit(ref=self._ref, raw=f"about {value}".encode(),
                                                                      format="text", sender=sender), self.now))
        (accepted,) = [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, Accepted)]
        message_id = accepted.message_id
        self.run(self.router.handle("reader", b"r", Reading(message_id=message_id, answer=value, source="recorded"),
                                    self.now))
        self.run(self.router.handle("validator", b"v", Passed(message_id=message_id, value=value), self.now))
        return message_id

    def decide(self, message_id: str, by: str, approve: bool = True) -> None:
        self._ref += 1
        self.run(self.router.handle("intake", b"c", Decide(ref=self._ref, message_id=message_id, approve=approve,
                                                           role="support-lead", by=by), self.now, f"{by}-key"))

    def actor_restarts(self) -> None:
        """The actor that lost its answer is gone (the broker's next send to it fails) and a
        new one joins: the broker sends the new one that email again (a redelivery)."""
        gone, self.actor_identity = self.actor_identity, self.actor_identity + b"'"
        self._hello()
        self.run(self.router.undeliverable(Send("actor", gone, Heartbeat()), self.now))


def refund_then_order_trace(settings: settings_module.Settings, make_actor: Any) -> list[dict[str, Any]]:
    """The refund task with approvals, replays and a redelivery, then `airlock up` again on
    the same data dir with the order task: the trace a trainer's class leaves."""
    refund = Lab(settings, make_actor("refund_with_approval.toml"), boot=0x100)
    first = refund.email("damaged")  # escalated; sam is no support lead; dana approves
    refund.decide(first, "sam")
    refund.decide(first, "dana")
    refund.lose_actor_replies = 1  # the actor ran step 1, then died before answering
    second = refund.email("late")
    refund.actor_restarts()  # redelivered: step 1 is a replay, step 2 escalates
    refund.decide(second, "sam")
    refund.decide(second, "sam")
    refund.decide(second, "dana")
    refund.email("wrong_item")  # left waiting for a person
    order = Lab(settings, make_actor("order_status.toml"), boot=0x200)
    order.email("4411")
    order.email("1234")
    return refund.lines + order.lines


def test_page_on_a_data_dir_where_another_task_ran(settings: settings_module.Settings, make_actor: Any) -> None:
    """Point 6: refund emails (approved, replayed, redelivered, one still waiting), then the
    order task on the same data dir: every counter is exact, none of the refund task's
    planned calls is outside the plan, and 5 emails never show 6 escalations."""
    records = refund_then_order_trace(settings, make_actor)
    escalations = [r for r in records if r["event"] == "outcome" and r["outcome"] == "escalated"]
    replays = [r for r in records if r["event"] == "call" and r["status"] == "replayed"]
    assert (len(escalations), len(replays)) == (6, 6)  # the trace holds what the page must not count
    board = Board(PLAN)  # the page was started with the order task
    for record in records:
        board.apply(record)
    assert board.counters == {"emails": 5, "completed": 4, "rejected": 0, "refused": 0, "escalated": 1,
                              "failed": 0, "outside_plan": 0, "ran_twice": 0}
    assert board.waiting() == [c["id"] for c in board.cards.values() if c["outcome"] == "escalated"]
    refund_cards = [c for c in board.cards.values() if c["task"] == "refund_with_approval"]
    assert len(refund_cards) == 3
    # The second email's first report was lost with its actor: its step 1 shows as the replay.
    for card, first in zip(refund_cards[:2], ("ok", "replayed"), strict=False):
        assert [(c["step"], c["tool"], c["status"], c["outside_plan"]) for c in card["calls"]] == [
            (1, "open_refund_case", first, False), (2, "send_refund_confirmation", "ok", False)]
    assert [c["task"] for c in board.cards.values()][3:] == ["order_status", "order_status"]


def test_a_call_is_judged_against_the_plan_recorded_with_it() -> None:
    """A call line names the plan it ran under: the page judges it against that plan, not its own."""
    board = Board(PLAN)
    theirs = [["shop", "open_refund_case"], ["mail", "send_refund_confirmation"]]
    board.apply(rec("call", "r-1", "actor", step=1, server="shop", tool="open_refund_case", args={}, status="ok",
                    task="refund_with_approval", plan=theirs))
    board.apply(rec("call", "r-2", "actor", step=1, server="shop", tool="lookup_order", args={}, status="ok",
                    task="refund_with_approval", plan=theirs))
    assert [board.cards[i]["calls"][0]["outside_plan"] for i in ("r-1", "r-2")] == [False, True]
    assert board.counters["outside_plan"] == 1


def test_a_plan_names_whole_pairs() -> None:
    """server "shop/x" with tool "y" is not the pair shop/"x/y": pairs are never joined to compare."""
    board = Board([("shop", "x/y")])
    board.apply(rec("call", stage="actor", step=1, server="shop/x", tool="y", args={}, status="ok",
                    plan=[["shop", "x/y"]]))
    assert board.counters["outside_plan"] == 1


@pytest.mark.parametrize("bad", [
    pytest.param({"server": ["shop"], "tool": "lookup_order"}, id="server-a-list"),
    pytest.param({"tool": {"name": "x"}}, id="tool-a-map"),
    pytest.param({"step": [1], "plan": [["shop", "lookup_order"], "nonsense", [1, 2]]}, id="step-a-list"),
    pytest.param({"plan": "shop/lookup_order"}, id="plan-a-string"),
])
def test_a_malformed_call_line_is_counted_outside_never_a_crash(bad: dict[str, Any]) -> None:
    """A call line whose pair, step or plan is not the right shape fails closed: outside the plan."""
    board = Board(PLAN)
    fields = {"step": 1, "server": "shop", "tool": "x", "args": {}, "status": "ok", **bad}
    board.apply(rec("call", stage="actor", **fields))
    assert board.counters["outside_plan"] == 1 and board.cards["m-1"]["calls"][0]["outside_plan"] is True
    entry = board.naive_update({"id": "n-1", "calls": [{"server": ["shop"], "tool": "lookup_order"}]})
    assert entry["outside_plan"] == 1


def test_a_replayed_call_is_not_a_new_call() -> None:
    """A replay (redelivery, restart, resume after approval) is listed once and never counted again."""
    board = Board(PLAN)
    for status in ("ok", "replayed", "replayed"):
        board.apply(rec("call", stage="actor", step=1, server="shop", tool="alles_erstatten", args={},
                        status=status))
    assert board.counters["outside_plan"] == 1
    assert [(c["step"], c["status"]) for c in board.cards["m-1"]["calls"]] == [(1, "ok")]


@pytest.mark.parametrize("again", ["ok", "error"])
def test_a_step_that_really_ran_twice_is_shown_and_counted(again: str) -> None:
    """A second real run of a step (not a replay) is listed, flagged repeated and counted once
    per email and step under ran_twice; a replay in between changes nothing."""
    board = Board(PLAN)
    for status in ("ok", "replayed", again, "ok"):
        board.apply(rec("call", stage="actor", step=1, server="shop", tool="lookup_order", args={}, status=status))
    assert board.counters["ran_twice"] == 1 and board.counters["outside_plan"] == 0
    assert [(c["status"], c["repeated"]) for c in board.cards["m-1"]["calls"]] == [
        ("ok", False), (again, True), ("ok", True)]


def test_a_step_that_ran_twice_after_its_card_is_gone_still_counts() -> None:
    """The repeat is counted even when the email's card was evicted after its outcome."""
    board = Board(PLAN, limit=1)
    board.apply(rec("call", stage="actor", step=1, server="shop", tool="lookup_order", args={}, status="ok"))
    board.apply(rec("outcome", outcome="completed", ended_at="actor", final=True))
    board.apply(rec("received", "m-2"))
    assert list(board.cards) == ["m-2"]
    board.apply(rec("call", stage="actor", step=1, server="shop", tool="lookup_order", args={}, status="ok"))
    assert board.counters["ran_twice"] == 1


def test_escalated_counts_emails_waiting_not_escalation_lines() -> None:
    """Two emails escalated five times: while both wait, escalated is 2; once decided, 0."""
    board = Board(PLAN)
    for message_id, times in (("m-1", 2), ("m-2", 3)):
        board.apply(rec("received", message_id))
        for _ in range(times):
            board.apply(rec("outcome", message_id, outcome="escalated", ended_at="actor", final=False))
    assert board.counters["escalated"] == 2 and board.waiting() == ["m-1", "m-2"]
    board.apply(rec("outcome", "m-1", outcome="completed", ended_at="actor", final=True))
    board.apply(rec("outcome", "m-2", outcome="refused", ended_at="actor", final=True))
    assert {k: board.counters[k] for k in ("emails", "escalated", "completed", "refused")} == {
        "emails": 2, "escalated": 0, "completed": 1, "refused": 1}


FINAL = [rec("received"), rec("model_answer", stage="reader", answer="4411", source="recorded", subject="first"),
         rec("verdict", stage="validator", verdict="rejected", rule="digits.pattern", reason="no"),
         rec("outcome", outcome="rejected", reason="no", ended_at="validator", rule="digits.pattern", final=True)]


@pytest.mark.parametrize("late", [
    pytest.param([rec("outcome", outcome="rejected", reason="no", ended_at="validator", final=True)],
                 id="same-outcome-again"),
    pytest.param([rec("outcome", outcome="completed", reason="", ended_at="actor", final=True)], id="other-outcome"),
    pytest.param([rec("outcome", outcome="escalated", reason="wait", ended_at="actor", final=False)],
                 id="escalated-after"),
    pytest.param([rec("model_answer", stage="reader", answer="9999", source="model", subject="late")],
                 id="late-answer"),
    pytest.param([rec("verdict", stage="validator", verdict="passed", value="9999")], id="late-verdict"),
    pytest.param([rec("observation", stage="actor", step=1, server="shop", tool="lookup_order", result={})],
                 id="observation"),
    pytest.param([rec("authorization", stage="actor", step=2, server="mail", tool="send_status",
                      decision={"verdict": "escalate", "reason": "x"})], id="late-authorization"),
    pytest.param([rec("call", stage="actor", step=1, server="shop", tool="lookup_order", args={}, status="replayed")],
                 id="replay"),
    pytest.param([rec("received")], id="received-again"),
])
def test_a_late_or_repeated_line_never_changes_a_finished_email(late: list[dict[str, Any]]) -> None:
    """After its final outcome an email's card, column and counters stay as they were."""
    board = Board(PLAN)
    for record in FINAL:
        board.apply(record)
    before = {k: v for k, v in board.cards["m-1"].items() if k not in ("events", "seq")}
    counters = dict(board.counters)
    for record in late:
        board.apply(record)
    assert {k: v for k, v in board.cards["m-1"].items() if k not in ("events", "seq")} == before
    assert board.counters == counters
    assert board.cards["m-1"]["events"][-1]["late"] is True  # still on the timeline, marked late


def test_a_late_line_for_a_forgotten_email_makes_no_card() -> None:
    """A finished email's card was evicted: a late line for it does not bring back an empty card."""
    board = Board(PLAN, limit=1)
    for record in FINAL:
        board.apply(record)
    board.apply(rec("received", "m-2"))
    assert list(board.cards) == ["m-2"]
    assert board.apply(rec("outcome", outcome="completed", ended_at="actor")) is None
    assert list(board.cards) == ["m-2"] and board.counters["completed"] == 0


def test_a_call_that_ran_after_the_outcome_still_counts() -> None:
    """A late call that really ran (not a replay) is a call: listed as late, counted if outside
    its plan; the email's outcome stays."""
    board = Board(PLAN)
    board.apply(rec("received"))
    board.apply(rec("outcome", outcome="failed", reason="no answer from the actor", ended_at="actor", final=True))
    board.apply(rec("call", stage="actor", step=1, server="shop", tool="alles_erstatten", args={}, status="ok"))
    card = board.cards["m-1"]
    assert card["outcome"] == "failed" and card["calls"][0]["late"] is True
    assert board.counters["outside_plan"] == 1 and board.counters["failed"] == 1


@given(st.lists(st.tuples(st.sampled_from(["m-1", "m-2", "m-3"]),
                          st.sampled_from(["received", *OUTCOMES])), max_size=40))
def test_counters_always_add_up(lines: list[tuple[str, str]]) -> None:
    """Whatever order, repeats or gaps: each email is counted once, under its latest outcome
    until a final one, and the outcome counters never sum past the emails."""
    board = Board(PLAN)
    latest: dict[str, str] = {}
    for message_id, event in lines:
        if event == "received":
            board.apply(rec("received", message_id))
            latest.setdefault(message_id, "open")
        else:
            board.apply(rec("outcome", message_id, outcome=event, ended_at="actor"))
            if latest.get(message_id, "open") in ("open", "escalated"):
                latest[message_id] = event
    assert board.counters["emails"] == len(latest)
    for outcome in OUTCOMES:
        assert board.counters[outcome] == sum(state == outcome for state in latest.values())
    assert sorted(board.waiting()) == sorted(i for i, state in latest.items() if state == "escalated")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
FIELD = st.sampled_from(["step", "server", "tool", "args", "status", "plan", "task", "outcome", "ended_at",
                         "decision", "verdict", "value", "answer", "source", "subject", "origin"])
RECORD = st.fixed_dictionaries(
    {"message_id": st.sampled_from(["m-1", "m-2", None]) | JSON,
     "stage": st.sampled_from(["broker", "reader", "validator", "actor", "supervisor"]) | JSON,
     "event": st.sampled_from(["received", "model_answer", "unreadable", "verdict", "authorization", "call",
                               "observation", "decision", "outcome"]) | JSON},
    optional={"at": JSON},
).flatmap(lambda base: st.dictionaries(FIELD, JSON, max_size=6).map(lambda extra: {**extra, **base}))


@given(st.lists(RECORD, max_size=30))
def test_any_trace_line_is_folded_without_a_crash(records: list[dict[str, Any]]) -> None:
    """Whatever the lines hold (wrong types anywhere), the board never raises and its
    counters stay whole numbers that add up."""
    board = Board(PLAN, limit=2)
    for record in records:
        board.apply(record)
    counters = board.counters
    found: list[object] = list(counters.values())  # whatever they are at run time: the lines were hostile
    assert all(isinstance(n, int) and n >= 0 for n in found)
    assert sum(counters[outcome] for outcome in OUTCOMES) <= counters["emails"]
    json.dumps(board.snapshot())  # what the page is sent still encodes
