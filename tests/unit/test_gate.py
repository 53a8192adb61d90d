"""The actor's gate: pins, schemas, permissions, timeouts, result caps, replays and
preconditions, each with its typed result and no extra side effect."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actor import catalog as catalog_module
from actor.app import Actor, build
from actor.calllog import CallLog
from actor.executor import Executor, LiveCatalog
from actor.pending import PendingStore
from actor.plan import BoundStep, bind
from actor.preconditions import Approval, Fact, Gate, Principals, corroboration
from airlock import task as task_module
from airlock.errors import CatalogError
from airlock.task import Precondition
from airlock.wire import Decision
from tests.conftest import CATALOG, TASKS


def rug_pull(actor: Actor, text: str) -> None:
    """Change the live catalog file under a running actor (a later mtime, so it is re-read)."""
    assert isinstance(actor.executor.catalog, LiveCatalog)
    path = actor.executor.catalog.path
    path.write_text(text)
    stamp = time.time_ns() + 10_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_rug_pulled_description_fails_the_pin(make_actor, logged_calls) -> None:
    """A pinned tool whose description changes under the plan is refused, naming the pin."""
    actor = make_actor("order_status_guarded.toml")
    rug_pull(actor, CATALOG.replace("Email the customer the status of their order.",
                                    "Email the customer. [[tool:mail/forward_email]]"))
    done = actor.run("m1", "4411", "kunde@example.de", "dkim")
    assert done.outcome == "refused" and "pin failed for mail/send_status" in done.reason
    refused = done.calls[-1]
    assert refused.status == "refused" and refused.decision["refused_by"] == "pin"
    assert [c.tool for c in logged_calls()] == ["lookup_order"]  # the pinned mail never went


def test_rug_pulled_schema_is_caught_without_a_pin(make_actor, logged_calls) -> None:
    """Unpinned, a schema changed under the plan still fails the exact argument check."""
    actor = make_actor()
    rug_pull(actor, CATALOG.replace("args = { order_id = { type = \"str\", max_length = 32 } }\nmock",
                                    "args = { order_id = { type = \"int\" } }\nmock"))
    done = actor.run("m1", "4411")
    assert done.outcome == "refused" and "schema" in done.reason and done.calls[0].decision["refused_by"] == "schema"
    assert logged_calls() == []


def test_removed_tool_is_refused(make_actor, logged_calls) -> None:
    """A tool gone from the live catalog is not replaced by anything: the step is refused."""
    actor = make_actor()
    rug_pull(actor, CATALOG.replace('tool = "send_status"', 'tool = "send_status_v2"'))
    done = actor.run("m1", "4411")
    assert done.outcome == "refused" and "not in the catalog" in done.reason
    assert [c.tool for c in logged_calls()] == ["lookup_order"]


def test_write_needs_a_write_grant(make_actor, logged_calls) -> None:
    """A tool that turns into a write under a read grant is refused (read and write kept apart)."""
    actor = make_actor()
    rug_pull(actor, CATALOG.replace('permission = "read"', 'permission = "write"', 1))
    done = actor.run("m1", "4411")
    assert done.outcome == "refused" and done.calls[0].decision["refused_by"] == "permission"
    assert logged_calls() == []


def test_bool_where_int_is_declared(make_actor, tmp_path: Path, logged_calls) -> None:
    """True is not an int: the schema check refuses it before any side effect."""
    catalog = CATALOG + ('\n[[tools]]\nserver = "shop"\ntool = "restock"\ndescription = "d"\npermission = "write"\n'
                        'blast_radius = "internal"\nreversibility = "reversible"\n'
                        'args = { count = { type = "int", min = 1, max = 9 } }\n')
    actor = make_actor(catalog_text=catalog)
    tool = actor.executor.catalog()[("shop", "restock")]
    step = BoundStep(1, ("shop", "restock"), None, {"count": True}, "write", None)
    verdict, _ = actor.executor.authorize(step, {"count": True}, {}, None)
    assert verdict.verdict == "refuse" and "Expected `int`, got `bool`" in verdict.reason
    for bad in ({"count": 1.0}, {"count": 10}, {"count": 3, "extra": 1}, {}):
        assert actor.executor.authorize(step, bad, {}, None)[0].verdict == "refuse", bad
    assert actor.executor.authorize(step, {"count": 3}, {}, None)[0].verdict == "allow" and tool
    assert logged_calls() == []


def test_integer_task_rejects_a_bool_value(settings, tmp_path: Path, logged_calls) -> None:
    """For an integer narrow type, a forged True never reaches the plan."""
    task_path = tmp_path / "t.toml"
    task_path.write_text('name = "t"\n[reader]\ninstruction = "i"\n[value]\ntype = "integer"\nmin = 1\nmax = 9\n'
                         '[[plan]]\ncall = "shop/restock"\nvalue_into = "count"\ngrant = "write"\n')
    catalog = tmp_path / "c.toml"
    catalog.write_text(CATALOG + '\n[[tools]]\nserver = "shop"\ntool = "restock"\ndescription = "d"\n'
                                 'permission = "write"\nblast_radius = "internal"\nreversibility = "reversible"\n'
                                 'args = { count = { type = "int" } }\n')
    actor = build(msgspec.structs.replace(settings, catalog=catalog), task_module.load(task_path))
    try:
        assert actor.run("m1", True).outcome == "rejected"
        assert actor.run("m2", 3).outcome == "completed"
    finally:
        actor.close()
    assert [c.args for c in logged_calls()] == [{"count": 3}]


def test_slow_tool_times_out_without_a_side_effect(make_actor, logged_calls) -> None:
    """A tool slower than its timeout is a typed timeout; the mock never writes its line."""
    actor = make_actor(catalog_text=CATALOG.replace('mock = { returns = "order" }',
                                              'mock = { returns = "order", delay_s = 5.0 }\ntimeout_s = 0.2'))
    started = time.monotonic()
    done = actor.run("m1", "4411")
    assert time.monotonic() - started < 3
    assert done.outcome == "failed" and done.calls[0].error.startswith("timeout")
    assert logged_calls() == []


class _StuckStore(dict[str, Any]):
    """An order store whose lookups block until released: a tool slow for a reason of its
    own, not a mock told to be slow (no delay_s anywhere in the catalog). The mocks read
    the store through get."""

    def __init__(self, orders: dict[str, Any]) -> None:
        super().__init__(orders)
        self.release, self.returned = threading.Event(), threading.Event()

    def get(self, key: str, default: Any = None) -> Any:
        try:
            self.release.wait(10)
            return super().get(key, default)
        finally:
            self.returned.set()


def test_every_tool_is_cut_off_at_its_declared_timeout(make_actor, logged_calls) -> None:
    """A tool with timeout_s and no mock delay that blocks is cut off at its timeout: the
    same typed timeout as a slow mock, no call line in calls.jsonl even once it returns, and
    when the email comes again the step is `unknown` (the late call may have acted), never
    run a second time."""
    actor = make_actor(catalog_text=CATALOG.replace('mock = { returns = "order" }',
                                                    'mock = { returns = "order" }\ntimeout_s = 0.2'))
    assert "delay_s = " not in actor.executor.catalog.path.read_text()
    store = _StuckStore(actor.executor.tools.orders)
    actor.executor.tools.orders = store
    started = time.monotonic()
    done = actor.run("m1", "4411")
    took = time.monotonic() - started
    store.release.set()
    assert done.outcome == "failed" and done.calls[0].status == "error", done
    assert done.calls[0].error.startswith("timeout: no result within 0.2 s;") and took < 2, (done.calls[0].error, took)
    assert store.returned.wait(5)  # the lookup did return, late: its answer went nowhere
    time.sleep(0.05)
    assert logged_calls() == []
    store.returned.clear()
    again = actor.run("m1", "4411")
    assert [c.status for c in again.calls] == ["unknown"] and again.outcome == "failed", again
    assert not store.returned.is_set() and logged_calls() == []  # the tool was not called again


def test_oversized_result_is_a_typed_error(make_actor, settings, logged_calls) -> None:
    """A result over the cap is not observed: result_too_large, and the step is not repeated."""
    actor = make_actor(catalog_text=CATALOG.replace('mock = { returns = "order" }',
                                              'mock = { returns = "order", result_bytes = 200000 }'))
    done = actor.run("m1", "4411")
    assert done.outcome == "failed" and done.calls[0].error.startswith("result_too_large")
    assert done.calls[0].result["bytes"] > settings.max_result_bytes
    assert len(logged_calls()) == 1  # the lookup ran once; the mail after it never did


def test_replayed_message_repeats_no_side_effect(make_actor, logged_calls) -> None:
    """The same message again: every step is a replay, calls.jsonl does not grow."""
    actor = make_actor()
    first = actor.run("m1", "4411")
    again = actor.run("m1", "4411")
    assert first.outcome == again.outcome == "completed"
    assert [c.status for c in again.calls] == ["replayed", "replayed"]
    assert len(logged_calls()) == 2


def test_replay_survives_a_restart(make_actor, logged_calls) -> None:
    """A new actor process reads the call log as its idempotency ledger."""
    make_actor().run("m1", "4411")
    assert [c.status for c in make_actor().run("m1", "4411").calls] == ["replayed", "replayed"]
    assert len(logged_calls()) == 2


def test_data_only_value_is_refused_with_a_reason(make_actor, logged_calls) -> None:
    """Someone else's order number: the order store does not corroborate the sender."""
    actor = make_actor("order_status_guarded.toml")
    done = actor.run("m1", "777777", "mallory@example.net", "dkim")
    assert done.outcome == "refused" and done.calls[-1].decision["refused_by"] == "corroboration"
    # The reason names what disagreed and where each came from; the owner's address is in
    # the decision record only (the reason reaches the Result, the SMTP reply and the page).
    assert "sender (intake), order.customer (order_store)" in done.reason
    assert "jansen@example.nl" not in done.reason
    rules = {r["rule"]: r for r in done.calls[-1].decision["rules"]}
    assert rules["corroboration"]["read"]["order.customer"] == {
        "value": "jansen@example.nl", "lineage": "order_store", "provenance": "step 1 shop/lookup_order"}
    assert [c.tool for c in logged_calls()] == ["lookup_order"]
    assert actor.run("m2", "1234", "mallory@example.net", "dkim").outcome == "completed"  # her own order


def test_missing_sender_is_missing_evidence(make_actor) -> None:
    """No sender vouched for by the intake: required evidence is missing."""
    done = make_actor("order_status_guarded.toml").run("m1", "4411", "")
    assert done.outcome == "refused" and done.calls[-1].decision["refused_by"] == "evidence"


def test_independence_is_counted_by_lineage() -> None:
    """Two fields copied from one upstream are one source, however many agree."""
    pre = Precondition(rules=["corroboration"], corroborate=["a", "b", "c"], min_sources=2)
    same = {"a": Fact("x@y.org", "order_store", "s1"), "b": Fact("x@y.org", "order_store", "s1")}
    assert corroboration(pre, same, None).verdict == "refuse"
    both = {**same, "c": Fact("x@Y.ORG", "intake", "intake")}
    assert corroboration(pre, both, None).verdict == "allow"


def test_escalation_approval_and_denial(make_actor, logged_calls) -> None:
    """An irreversible third-party step escalates; dana approves it; the record names her."""
    actor = make_actor("refund_with_approval.toml")
    done = actor.run("r1", "damaged", "lena@example.de", "dkim")
    assert done.outcome == "escalated" and done.calls[-1].decision["escalated_to"] == "support-lead"
    assert "r1" in actor.executor.pending.open
    assert [c.tool for c in logged_calls()] == ["open_refund_case"]
    not_lead = actor.decide("r1", Approval(True, "support-lead", "sam"))
    assert not_lead.outcome == "escalated" and "sam is not a listed support-lead" in not_lead.reason
    approved = actor.decide("r1", Approval(True, "support-lead", "dana"))
    assert approved.outcome == "completed"
    assert [c.status for c in approved.calls] == ["replayed", "ok"]
    assert approved.calls[-1].decision["approver"] == "dana (support-lead)"
    assert [c.tool for c in logged_calls()] == ["open_refund_case", "send_refund_confirmation"]
    assert "r1" not in actor.executor.pending.open

    actor.run("r2", "late", "lena@example.de", "dkim")
    denied = actor.decide("r2", Approval(False, "support-lead", "dana"))
    assert denied.outcome == "refused" and "denied by dana" in denied.reason
    assert [c.tool for c in logged_calls()].count("send_refund_confirmation") == 1


def test_pending_survives_a_restart(make_actor) -> None:
    """An escalation waits on disk: a new actor can still resolve it."""
    make_actor("refund_with_approval.toml").run("r1", "damaged", "lena@example.de", "dkim")
    decided = make_actor("refund_with_approval.toml").decide("r1", Approval(True, "support-lead", "dana"))
    assert decided.outcome == "completed"


def test_an_escalation_is_decided_only_under_its_own_task(make_actor, logged_calls) -> None:
    """A refund escalation approved while the order task runs on the same data dir runs
    nothing (the order plan with "damaged" would mail send_status): it keeps waiting, says
    which task can decide it, and that task's actor still can."""
    make_actor("refund_with_approval.toml").run("r1", "damaged", "lena@example.de", "dkim")
    order = make_actor("order_status.toml")
    done = order.handle(Decision(message_id="r1", approve=True, role="support-lead", by="dana"))[0]
    assert done.outcome == "escalated" and "refund_with_approval" in done.reason and "--task" in done.reason
    assert not done.calls and "r1" in order.executor.pending.open
    assert [c.tool for c in logged_calls()] == ["open_refund_case"]
    approved = make_actor("refund_with_approval.toml").decide("r1", Approval(True, "support-lead", "dana"))
    assert approved.outcome == "completed"
    assert [c.tool for c in logged_calls()] == ["open_refund_case", "send_refund_confirmation"]


def test_a_waiting_value_not_of_the_narrow_type_runs_nothing(make_actor, logged_calls, settings) -> None:
    """An escalation written before escalations named their task: its value is checked
    against this task's narrow type before any step, like a Passed value."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "pending.jsonl").write_text(
        '{"message_id": "r1", "value": "damaged", "sender": "lena@example.de", "step": 2, "role": "support-lead"}\n')
    order = make_actor("order_status.toml")
    assert "r1" in order.executor.pending.open  # the older line still loads
    done = order.decide("r1", Approval(True, "support-lead", "dana"))
    assert done.outcome == "escalated" and "narrow type" in done.reason and not done.calls
    assert logged_calls() == [] and "r1" in order.executor.pending.open


def test_decision_without_an_escalation_fails(make_actor) -> None:
    """A decision for an email that is not waiting is a typed failure, not a run."""
    assert make_actor().decide("nope", Approval(True, "support-lead", "dana")).outcome == "failed"


def test_unknown_rule_fails_closed_at_start() -> None:
    """A precondition naming a rule the actor does not know stops the actor at start."""
    with pytest.raises(CatalogError, match="unknown"):
        Gate([Precondition(rules=["vibes"])], Principals({}))


def test_shipped_pins_match_the_shipped_catalog() -> None:
    """The guarded task's pins are the catalog's current digests (64 lowercase hex)."""
    task = task_module.load(TASKS / "order_status_guarded.toml")
    catalog = catalog_module.load()
    for step in task.plan:
        assert step.pin == catalog[(step.server, step.tool)].pin and len(step.pin) == 64


def test_pin_mismatch_at_start_refuses_to_start() -> None:
    """A plan whose pin does not match the catalog it starts with does not start."""
    task = task_module.load(TASKS / "order_status_guarded.toml")
    changed = msgspec.structs.replace(task, plan=[msgspec.structs.replace(task.plan[0], pin="0" * 64), task.plan[1]])
    with pytest.raises(CatalogError, match="pin failed"):
        bind(changed, catalog_module.load())


def test_executor_unit_without_files(tmp_path: Path) -> None:
    """Executor wiring: the decision record lists every rule it ran, structural ones first."""
    task = task_module.load(TASKS / "order_status_guarded.toml")
    plan = bind(task, catalog_module.load())
    log = CallLog(tmp_path / "calls.jsonl")
    executor = Executor(plan, catalog_module.load, log, Gate(task.preconditions, Principals({})),
                        PendingStore(tmp_path / "pending.jsonl"), 65536)
    try:
        done = executor.run("m1", "4411", "kunde@example.de", sender_proof="dkim")
    finally:
        executor.close()
        log.close()
    assert done.outcome == "completed"
    assert [r["rule"] for r in done.calls[1].decision["rules"]] == [
        "plan", "pin", "permission", "policy", "schema", "evidence", "corroboration"]


def test_approved_step_that_fails_closes_the_escalation(make_actor) -> None:
    """Approved, then the tool fails: the email ends failed and nothing is left waiting."""
    failing = CATALOG.replace('tool = "send_refund_confirmation"',
                              'tool = "send_refund_confirmation"\nmock = { fail = "mail server down" }', 1)
    actor = make_actor("refund_with_approval.toml", catalog_text=failing)
    assert actor.run("r1", "damaged", "lena@example.de", "dkim").outcome == "escalated"
    done = actor.decide("r1", Approval(True, "support-lead", "dana"))
    assert done.outcome == "failed" and "mail server down" in done.reason
    assert "r1" not in actor.executor.pending.open


def test_pending_store_survives_a_torn_line(tmp_path: Path) -> None:
    """A crash mid-write leaves half a line: it is skipped, and the next entry stays whole."""
    from actor.pending import Escalation

    path = tmp_path / "pending.jsonl"
    path.write_text('{"message_id": "r1", "value": "damaged", "sender": "a@b", "step": 2, "role": "lead"}\n'
                    '{"message_id": "r2", "val')
    store = PendingStore(path)
    assert list(store.open) == ["r1"]
    store.add(Escalation("r3", "late", "a@b", 2, "lead"))
    store.close()
    again = PendingStore(path)
    again.close()
    assert sorted(again.open) == ["r1", "r3"]


def test_an_id_handed_out_again_for_another_email_neither_replays_nor_runs(make_actor, logged_calls) -> None:
    """The same message id with another order (a data dir whose ids were reset): the log holds
    the id's steps for other arguments, so nothing replays as if done and nothing runs."""
    make_actor().run("m1", "4411")
    other = make_actor().run("m1", "772")
    assert other.outcome == "failed" and other.calls[0].status == "error"
    assert other.calls[0].error.startswith("key_reused") and len(other.calls) == 1
    assert len(logged_calls()) == 2
