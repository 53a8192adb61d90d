"""The actor's handle(): Passed in, the plan run through the executor, Done out.

A Decision (a person's answer to an escalated step) resumes that email's plan: a step the
call log already holds is `replayed` with the result it kept, its tool never called again
(see the executor: each key is claimed by a durable intent before its tool runs).

The ledger (actor/calllog.py, actor/ledger.py) is trusted or not acted on: if calls.jsonl is
deleted or replaced while the actor runs, the call that finds it out is not made, and from
then on no call is. Emails it held get no answer (a `failed` would be final, and false:
nothing is wrong with them); the answers already made go out with their calls synced, and
the actor exits 75. The broker hands the unanswered emails to its successor, which first
reconciles the log with the key index (every key is kept, so a step that ran is `replayed`,
never run again) and says what it found: on stderr, and in the trace (`worker.ledger_replaced`).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import msgspec

from actor import catalog as catalog_module, plugs
from actor.calllog import CallLog
from actor.executor import Executor, LiveCatalog
from actor.ledger import LedgerUntrusted, LedgerWriteFailed
from actor.pending import PendingStore
from actor.plan import bind
from actor.preconditions import Approval, Gate, Principals
from airlock.service import serve_role
from airlock.settings import Settings
from airlock.task import Task
from airlock.transport import Channel
from airlock.wire import Decision, Done, Event, Message, Passed


class Actor:
    def __init__(self, executor: Executor, value_type: Any, ledger: CallLog) -> None:
        self.executor, self.value_type, self.ledger = executor, value_type, ledger
        self.task, self.plan = executor.task, [step.pair for step in executor.plan]
        # What the ledger's start found (a replaced call log): told with the first answer.
        self._notices: list[Message] = [Event(event=n["event"], detail=n["detail"]) for n in ledger.notices]

    def handle(self, message: Message) -> list[Message]:
        notices, self._notices = self._notices, []
        answers = self._answer(message)
        if self.ledger.untrusted:  # no answer: the successor runs it on a reconciled ledger
            answers = [answer for answer in answers if not isinstance(answer, Done)]
        return notices + answers

    def _answer(self, message: Message) -> list[Message]:
        match message:
            case Passed(message_id=message_id, value=value, sender=sender, sender_proof=proof):
                done = self.run(message_id, value, sender, proof)
            case Decision(message_id=message_id, approve=approve, role=role, by=by, key=key):
                done = self.decide(message_id, Approval(approve, role, by, key))
            case _:
                return []  # this role's decoder admits only Passed and Decision
        # A step whose effect no one can tell is said on its own, for a person to find and check.
        unknown = [call for call in done.calls if call.status == "unknown"]
        for call in unknown:
            print(f"actor: WARNING: {call.key} {call.server}/{call.tool} was called before and its result never "
                  "recorded: it may have taken effect. It will not run again; a person must check", file=sys.stderr)
        said: list[Message] = [Event(event="call_unknown", message_id=done.message_id, detail={
            "step": call.step, "server": call.server, "tool": call.tool, "key": call.key}) for call in unknown]
        # Every answer names the task and plan it ran under, for the trace (see wire.Done).
        return [*said, msgspec.structs.replace(done, task=self.task, plan=self.plan)]

    def run(self, message_id: str, value: int | str, sender: str = "", sender_proof: str = "none") -> Done:
        # The validator already checked the value; checking again costs nothing and means
        # a bug or a forged message upstream still cannot put free text into a tool call.
        try:
            value = msgspec.convert(value, self.value_type, strict=True)
        except msgspec.ValidationError as exc:
            return Done(message_id=message_id, outcome="rejected", reason=f"value is not of the narrow type: {exc}")
        return self.executor.run(message_id, value, sender, sender_proof=sender_proof)

    def decide(self, message_id: str, approval: Approval) -> Done:
        escalation = self.executor.pending.open.get(message_id)
        if escalation is None:
            return Done(message_id=message_id, outcome="failed", reason="no escalated step is waiting for this email")
        # The data dir may have run another task before this one: its escalation is not ours
        # to resume (our plan, with its value, would run calls its plan never named). It keeps
        # waiting, nothing runs, and the reason says which task can decide it.
        if escalation.task and escalation.task != self.task:
            return Done(message_id=message_id, outcome="escalated", reason=(
                f"escalated under the task {escalation.task}, but this airlock runs {self.task}; nothing ran. "
                f"To decide it, start airlock up with the task file of {escalation.task} (--task or AIRLOCK_TASK)"))
        try:  # an escalation from before they named their task: at least the value's type
            value = msgspec.convert(escalation.value, self.value_type, strict=True)
        except msgspec.ValidationError as exc:
            return Done(message_id=message_id, outcome="escalated", reason=(
                f"the waiting value is not of this task's narrow type ({exc}), so it was escalated under "
                "another task; nothing ran. To decide it, start airlock up with that task file (--task or "
                "AIRLOCK_TASK)"))
        return self.executor.run(message_id, value, escalation.sender, approval, escalation.step,
                                 sender_proof=escalation.sender_proof)

    def sync(self) -> None:
        """Before any answer leaves (the worker loop's group commit): the calls made and the
        escalations opened or closed are on disk. If either fsync fails, both files are cut
        back to their last sync and LedgerWriteFailed goes up: none of the batch's answers may
        leave (they would acknowledge what is not on disk), so the actor exits and the broker
        hands the batch to its successor, which finds the calls that are on disk as replays."""
        try:
            self.ledger.sync()
            self.executor.pending.sync()
        except LedgerWriteFailed:
            self.ledger.rollback()
            self.executor.pending.rollback()
            raise

    @property
    def untrusted(self) -> str:
        return self.ledger.untrusted

    def close(self) -> None:
        self.executor.close()
        self.ledger.close()


def build(settings: Settings, task: Task) -> Actor:
    """Load the catalog, bind the plan and the preconditions; raises before any message."""
    catalog_path = settings.catalog or catalog_module.DEFAULT_PATH
    plan = bind(task, catalog_module.load(catalog_path))
    gate = Gate(task.preconditions, Principals.load(task.principals_path))
    ledger = CallLog(settings.calls_path)
    plug = plugs.build(settings.student_code, settings.student_timeout_s, [step.pair for step in plan])
    pending = PendingStore(settings.data_dir / "pending.jsonl")
    executor = Executor(plan, LiveCatalog(catalog_path), ledger, gate, pending, settings.max_result_bytes, task.name,
                        plug)
    return Actor(executor, task.value_decoder(), ledger)


def serve(settings: Settings, task: Task, stop: threading.Event, channel: Channel | None = None) -> None:
    actor = build(settings, task)

    def handle(message: Message) -> list[Message]:
        answers = actor.handle(message)
        if actor.untrusted:
            stop.set()  # the answers already made still go (synced); then a restart reconciles the ledger
        return answers

    try:
        serve_role(settings, "actor", handle, settings.worker_credit, stop, channel, before_replies=actor.sync)
    finally:
        actor.close()
    if actor.untrusted:
        raise LedgerUntrusted(f"{actor.untrusted}; stopped acting on it: restart to reconcile it with the key index")
