"""The executor (taught in lab executor-checks): every check before any side effect, typed results after.

For each plan step, in order:
  authorization   the pair is in the plan and the live catalog (bound rule), its pin still
                  holds, the step's grant covers the tool's permission, the arguments fit
                  the schema exactly, and the tool class's preconditions allow it;
  execution       the step's key (message id and step) is claimed first: an intent record,
                  fsynced before the tool is called; then the tool runs under the timeout_s
                  its catalog entry declares (every tool, every call, stopped at its
                  deadline: actor/deadline.py); then what it returned is recorded. A step
                  claimed before is never called again: `replayed` with the result the log
                  kept, or `unknown` (the email `failed`, for a person to check) when no
                  result was recorded (a crash after the call, a tool that failed or overran);
  observation     the result, capped in size; the facts the catalog declares the tool
                  provides (Tool.provides) feed later preconditions.
A failure at any point is a typed result in the trace, never an invented success. What a
tool does is the mock tools' (actor/mocks.py); what ran, the call log's (actor/calllog.py);
this module reads neither's settings to decide anything, only the catalog's declarations.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from actor import catalog as catalog_module, schema
from actor.calllog import DONE, UNKNOWN, CallLog, call_key
from actor.catalog import Catalog, Tool
from actor.deadline import Deadlines, Overran
from actor.ledger import LedgerUntrusted, LedgerWriteFailed
from actor.mocks import MockTools
from actor.pending import Escalation, PendingStore
from actor.plan import BoundStep, structural_problem
from actor.plugs import ActorPlug
from actor.preconditions import Approval, Fact, Gate, RuleResult, Verdict
from airlock import senders
from airlock.wire import Call, Done

_json = msgspec.json.Encoder()
# Why a step is `unknown`: claimed, called, never recorded. Said to whoever reads the outcome.
UNKNOWN_STEP = ("unknown: this step's call was made before (its intent is in the call log) but no result was "
                "ever recorded for it (the actor stopped after calling the tool, or the tool failed or "
                "overran), so it may or may not have taken effect; it never runs again: a person must check "
                "the tool's own records")
# Why a step whose key the log holds for another call neither runs nor replays: the message id
# was handed out before (a data dir's ids reset), so this is a different email, not a replay.
KEY_REUSED = ("key_reused: the call log holds this message id and step for a different call (another tool or other "
              "arguments): this email is not the one recorded, so its step is neither replayed nor run; nothing ran, "
              "and a person must check why an id was handed out twice")
UNFINISHED = "; its key stays claimed: if this email runs again the step is `unknown`, never run twice"
# The checks authorize() runs on every step before the task's preconditions; a decision
# record lists each of them as allowed (lab graders tell them from a guard's own rules).
STRUCTURAL_CHECKS = ("plan", "pin", "permission", "policy", "schema")


class LiveCatalog:
    """The catalog as it is now: re-read when its file changes, as a live tool server's
    list would. An unreadable catalog is an empty one: every step is refused.

    A change is any new inode, size or ctime. Not the mtime alone: `cp -p` or `os.utime`
    puts an old mtime on a new catalog (a rug pull that keeps its date); the ctime is the
    kernel's and cannot be set back. One os.stat per step, on a str (Path.stat cost twice it)."""

    def __init__(self, path: Path) -> None:
        self.path, self._where = path, str(path)
        self._stamp: tuple[int, int, int] | None = None
        self._catalog: Catalog = {}

    def __call__(self) -> Catalog:
        try:
            found = os.stat(self._where)
        except OSError:
            return {}
        stamp = (found.st_ino, found.st_size, found.st_ctime_ns)
        if stamp != self._stamp:
            try:
                self._catalog = catalog_module.load(self.path)
            except Exception:  # noqa: BLE001  a catalog that does not load declares no tool: fail closed
                self._catalog = {}
            self._stamp = stamp
        return self._catalog


class Executor:
    def __init__(self, plan: list[BoundStep], catalog: Callable[[], Catalog], ledger: CallLog, gate: Gate,
                 pending: PendingStore, max_result_bytes: int, task: str = "", plug: ActorPlug | None = None,
                 tools: MockTools | None = None) -> None:
        self.plan, self.catalog, self.ledger, self.gate = plan, catalog, ledger, gate
        self.pending, self.max_result_bytes, self.task = pending, max_result_bytes, task
        self.tools = MockTools() if tools is None else tools  # what each call does and returns
        self.plug = plug  # a lab's student code at one of the actor's plug points (actor/plugs.py)
        self.student = plug.point if plug else ""  # marks every call whose decision ran it
        self._deadlines = Deadlines()

    def run(self, message_id: str, value: int | str, sender: str, approval: Approval | None = None,
            approval_step: int = 0, *, sender_proof: str = "none") -> Done:
        """Run the plan for one email. `sender_proof` is what proved `sender` (wire.Submit):
        without a proof the sender is `unverified` and corroborates nothing."""
        done = self._steps(message_id, value, sender, sender_proof, approval, approval_step)
        # Whatever ended it, nothing waits for a person now; unless the ledger stopped it: the
        # actor then sends no answer and its successor resumes the escalation (actor/app.py).
        if done.outcome != "escalated" and not self.ledger.untrusted:
            self.pending.resolve(message_id)
        return done

    def _steps(self, message_id: str, value: int | str, sender: str, sender_proof: str,
               approval: Approval | None, approval_step: int) -> Done:
        lineage = senders.lineage(sender_proof)
        facts = {"value": Fact(value, "email", "reader, validator"),
                 "sender": Fact(senders.normalized(sender) if sender else None, lineage,
                                f"intake ({sender_proof})" if lineage == senders.AUTHENTICATED
                                else "the From address as claimed, not authenticated")}
        if approval is not None and (gap := self._unrecorded_before(message_id, approval_step)):
            return Done(message_id=message_id, outcome="failed", reason=gap)
        calls: list[Call] = []
        for step in self.plan:
            args = step.arguments(value)
            verdict, tool = self.authorize(step, args, facts, approval if step.number == approval_step else None)
            call = Call(step=step.number, server=step.pair[0], tool=step.pair[1], args=args, status="ok",
                        key=call_key(message_id, step.number), decision=verdict.record(), student=self.student)
            where = f"step {step.number} {step.pair[0]}/{step.pair[1]}"
            if verdict.verdict == "refuse":
                calls.append(msgspec.structs.replace(call, status="refused"))
                return Done(message_id=message_id, outcome="refused", reason=f"{where}: {verdict.reason}", calls=calls)
            if verdict.verdict == "escalate":
                try:
                    self.pending.add(Escalation(message_id, value, sender, step.number, verdict.escalate_to,
                                                self.task, sender_proof))
                except LedgerWriteFailed as exc:  # not stored, so no one could ever decide it
                    calls.append(msgspec.structs.replace(call, status="error", error=f"pending_write_failed: {exc}"))
                    return Done(message_id=message_id, outcome="failed", calls=calls, reason=(
                        f"{where}: needs a person's approval, but it could not be stored ({exc}); nothing waits"))
                calls.append(msgspec.structs.replace(call, status="escalated"))
                return Done(message_id=message_id, outcome="escalated", reason=f"{where}: {verdict.reason}",
                            calls=calls)
            assert tool is not None, "authorize allows a step only once it found the step's tool"
            call = self.execute(call, tool, message_id, step, args)
            calls.append(call)
            if call.status in ("error", "unknown"):
                return Done(message_id=message_id, outcome="failed", reason=f"{where}: {call.error}", calls=calls)
            if tool.provides is not None:  # declared in the catalog, pinned with its policy
                for name in tool.provides.fields:
                    facts[f"{tool.provides.fact}.{name}"] = Fact(call.result.get(name), tool.provides.lineage, where)
        return Done(message_id=message_id, outcome="completed", calls=calls)

    def authorize(self, step: BoundStep, args: dict[str, Any], facts: dict[str, Fact],
                  approval: Approval | None) -> tuple[Verdict, Tool | None]:
        catalog = self.catalog()  # one reading for the student's code and the kernel alike
        # A student's selection or checks are asked first; the kernel's own still run after
        # them, so student code can only make a step stricter (actor/plugs.py).
        student = self.plug.before(step, args, catalog) if self.plug else None
        if student is not None:
            return Verdict("refuse", student.reason, rules=[student]), catalog.get(step.pair)
        rule, reason, tool = structural_problem(step, catalog)
        if not rule and tool is not None:
            problem = schema.problem(tool, args)
            if problem:
                rule, reason = "schema", f"arguments do not match the schema: {problem}"
        if rule or tool is None:  # no tool: the plan rule failed
            refusal = RuleResult(rule, "refuse", reason, {"args": args})
            if rule == "schema" and self.plug is not None and self.plug.point == "actor.checks":
                refusal = self.plug.missed(refusal)
            return Verdict("refuse", refusal.reason, rules=[refusal]), tool
        checks = [RuleResult(name, "allow") for name in STRUCTURAL_CHECKS]
        if self.plug is not None and self.plug.point == "actor.decide":
            verdict = self.plug.decide(self.gate, tool, facts, approval)
        else:
            verdict = self.gate.check(tool, facts, approval)
        verdict.rules = checks + verdict.rules
        return verdict, tool

    def execute(self, call: Call, tool: Tool, message_id: str, step: BoundStep, args: dict[str, Any]) -> Call:
        """Claim the step's key (a durable intent), call the tool, record what it returned. A
        step claimed before is never called again: `replayed` with the result the ledger kept,
        or `unknown` if no result was ever recorded for it (it may have taken effect)."""
        try:
            claimed = self.ledger.claim(message_id, step.number, tool.server, tool.tool, args, self.student)
        except LedgerUntrusted as exc:
            return msgspec.structs.replace(call, status="error", error=str(exc))
        except LedgerWriteFailed as exc:  # the intent is not durable: the tool must not run
            return msgspec.structs.replace(call, status="error", error=f"ledger_write_failed: {exc}; nothing ran")
        if claimed.state == UNKNOWN:
            return msgspec.structs.replace(call, status="unknown", error=UNKNOWN_STEP)
        if claimed.state == DONE and not claimed.same_call(tool.server, tool.tool, args):
            return msgspec.structs.replace(call, status="error", error=KEY_REUSED)
        if claimed.state == DONE:
            return msgspec.structs.replace(call, status="replayed", result=claimed.result or {})
        try:
            answer = self._deadlines.call(functools.partial(self.tools.run, tool, args), tool.timeout_s)
        except Overran as exc:  # Deadlines told the call (a slow mock stops at once); it may have acted
            return msgspec.structs.replace(call, status="error", error=f"timeout: {exc}{UNFINISHED}")
        except Exception as exc:  # noqa: BLE001  the tool boundary: any failure is a typed failed call
            return msgspec.structs.replace(call, status="error",
                                           error=f"tool_error: {type(exc).__name__}: {exc}{UNFINISHED}")
        result = answer.result
        size = len(_json.encode(result))
        kept = result if size <= self.max_result_bytes else None
        try:
            self.ledger.record(message_id, step.number, tool.server, tool.tool, args, self.student, answer.to, kept)
        except LedgerWriteFailed as exc:
            return msgspec.structs.replace(call, status="error", error=(
                f"ledger_write_failed: {exc}; the tool answered, but its record could not be kept{UNFINISHED}"))
        if kept is None:
            return msgspec.structs.replace(call, status="error", result={"bytes": size, "cap": self.max_result_bytes},
                                           error=f"result_too_large: {size} bytes, cap {self.max_result_bytes}")
        return msgspec.structs.replace(call, status="ok", result=result)

    def _unrecorded_before(self, message_id: str, approval_step: int) -> str:
        """Why resuming this email could repeat a side effect ("" if it cannot): every step
        before the escalated one ran before it waited, so the ledger must hold each of their
        calls. One it does not hold means the ledger was deleted or replaced meanwhile, and
        running the plan from the top would make that call again."""
        for step in self.plan:
            if step.number < approval_step and not self.ledger.made(message_id, step.number):
                return (f"ledger_untrusted: step {step.number} {step.pair[0]}/{step.pair[1]} ran before this email "
                        "was escalated, but the ledger holds no record of it (calls.jsonl and its key index were "
                        "deleted or replaced); nothing ran, so no step runs twice")
        return ""

    def close(self) -> None:
        self._deadlines.close()
        self.pending.close()
        if self.plug is not None:
            self.plug.close()
