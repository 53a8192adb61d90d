"""The actor's plug points (the labs): a student's selection, checks or decision, asked
before the kernel's own, never instead of it.

Data: the plan step, its arguments, the live catalog and the facts of one email, handed to
the student's functions as plain data (or the actor's own types, pickled) through
studentcode.student.StudentCode, which runs them in a child process under a deadline.
Readers: the executor, for every step, when AIRLOCK_STUDENT_CODE names one of
"actor.select", "actor.checks" or "actor.decide".
Rationale: the student's code can only make a step STRICTER. Whatever it answers, the
kernel's own checks run afterwards, so a wrong answer cannot put a call outside the plan or
a wrong argument through; it is recorded instead, under a rule the grader can name:

    student.selection  the student's bound_tool_choice chose another pair (or none)
    student.checks     the student's checks found a problem (a refusal, with their reason)
    student.missed     the student's checks or decide allowed what the kernel refuses
    student.failed     the student's function failed (StudentFailed.describe()) or answered
                       in a shape the contract does not allow: fail closed, the step is refused
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from actor.catalog import Catalog, Tool
from actor.plan import BoundStep
from actor.preconditions import Approval, Fact, Gate, RuleResult, Verdict
from actor.selection import bound_pair
from airlock.plugs import Plug
from studentcode.student import StudentCode, StudentFailed

SHOWN_CHARS = 120  # of a student's answer quoted in a reason: enough to recognise it
# A student's answer kept in a decision record, at most: the record travels in the actor's
# Done (one frame, AIRLOCK_MAX_FRAME_BYTES) and into the trace, whatever the student returned.
MAX_KEPT_BYTES = 8 * 1024
VERDICTS = ("allow", "refuse", "escalate")
_STRICTNESS = {"allow": 0, "escalate": 1, "refuse": 2}


def _shown(value: Any) -> str:
    return _cut(repr(value))


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def _kept(value: Any) -> Any:
    """A student's answer for the record, or its size when it is too large to keep."""
    size = len(msgspec.json.encode(value))
    return value if size <= MAX_KEPT_BYTES else {"bytes": size, "cap": MAX_KEPT_BYTES}


def _refusal(rule: str, reason: str, read: dict[str, Any] | None = None) -> RuleResult:
    return RuleResult(rule, "refuse", reason, read or {})


def _failed(failed: StudentFailed) -> RuleResult:
    return _refusal("student.failed", f"{failed.describe()}; the step is refused (fail closed)")


def _pair(pair: tuple[str, str] | None) -> dict[str, str] | None:
    return None if pair is None else {"server": pair[0], "tool": pair[1]}


def schema_of(tool: Tool) -> dict[str, dict[str, Any]]:
    """A tool's argument schema as the executor-checks lab's contract shows it:
    {name: {"type", and "min", "max", "max_length" where the catalog sets them}}."""
    return {name: {key: value for key, value in msgspec.structs.asdict(arg).items() if value is not None}
            for name, arg in tool.args.items()}


class ActorPlug:
    """One student file in the actor's place at one plug point."""

    def __init__(self, plug: Plug, code: StudentCode, plan: list[tuple[str, str]]) -> None:
        self.point, self.code, self.plan = plug.point, code, plan

    # --- actor.select and actor.checks: before the kernel's structural and schema checks ---

    def before(self, step: BoundStep, args: dict[str, Any], catalog: Catalog) -> RuleResult | None:
        """A refusal from the student's selection or checks, or None when they agree."""
        if self.point == "actor.select":
            return self._select(step, catalog)
        if self.point == "actor.checks":
            return self._checks(step, args, catalog)
        return None

    def _select(self, step: BoundStep, catalog: Catalog) -> RuleResult | None:
        # Data: the live catalog in its order, as the seed's records; the step's pair.
        # Rationale: the kernel's answer is the bound rule's; any other choice is refused.
        listing = [{"server": t.server, "tool": t.tool, "description": t.description} for t in catalog.values()]
        requested = _pair(step.pair)
        answer = self.code.call("bound_tool_choice", listing, requested)
        if isinstance(answer, StudentFailed):
            return _failed(answer)
        expected = _pair(bound_pair(catalog.keys(), step.pair))
        read = {"requested": requested, "answer": _kept(answer)}
        if not isinstance(answer, dict) or "choice" not in answer:
            return _refusal("student.failed", f"your bound_tool_choice() returned {_shown(answer)}, not a dict "
                                              "with a 'choice'; the step is refused (fail closed)", read)
        chosen = answer["choice"]
        if chosen == expected:
            return None
        is_pair = isinstance(chosen, dict) and set(chosen) == {"server", "tool"}
        shown = "nothing (None)" if chosen is None else (
            _cut(f"{chosen['server']}/{chosen['tool']}") if is_pair else _shown(chosen))
        planned = f"{step.pair[0]}/{step.pair[1]}"
        return _refusal("student.selection", f"your bound_tool_choice() chose {shown} for the planned "
                                             f"{planned}; nothing ran", read)

    def _checks(self, step: BoundStep, args: dict[str, Any], catalog: Catalog) -> RuleResult | None:
        # Data: the call as the seed's JSON, the plan's pairs as the allowlist, and the live
        # catalog tool's schema. A pair the catalog lacks is the kernel's to refuse (rule
        # plan): the lab's execute() looks the tool up itself, after allowlist_problem.
        call = {"server": step.pair[0], "tool": step.pair[1], "arguments": dict(args)}
        problem = self._problem("allowlist_problem", call, set(self.plan))
        if problem is None and step.pair in catalog:
            schema = schema_of(catalog[step.pair])
            problem = (self._problem("schema_problem", dict(args), schema)
                       or self._problem("range_problem", dict(args), schema))
        if problem is not None:
            problem.read["call"] = call  # what the student's checks judged, for the record
        return problem

    def _problem(self, function: str, *args: Any) -> RuleResult | None:
        answer = self.code.call(function, *args)
        if isinstance(answer, StudentFailed):
            return _failed(answer)
        if answer is None:
            return None
        if isinstance(answer, dict) and isinstance(answer.get("kind"), str) and isinstance(answer.get("detail"), str):
            return _refusal("student.checks", f"your {function}() found a problem: "
                                              f"{_cut(answer['kind'])}: {_shown(answer['detail'])}",
                            {"answer": _kept(answer)})
        return _refusal("student.failed", f"your {function}() returned {_shown(answer)}, neither None nor an "
                                          "Error(kind, detail); the step is refused (fail closed)")

    def close(self) -> None:
        self.code.close()

    def missed(self, rule: RuleResult) -> RuleResult:
        """The kernel refused what the student's checks allowed (a schema or range problem)."""
        return _refusal("student.missed", f"your checks allowed it, but the kernel refuses: {rule.reason}", rule.read)

    # --- actor.decide: the student's decision, then the kernel's, the stricter wins ---------

    def decide(self, gate: Gate, tool: Tool, facts: dict[str, Fact], approval: Approval | None) -> Verdict:
        kernel = gate.check(tool, facts, approval)
        answer = self.code.call("decide", gate.preconditions, tool, facts, approval, gate.principals)
        if isinstance(answer, StudentFailed):
            return _stopped(_failed(answer), kernel)
        student = _as_verdict(answer)
        if isinstance(student, RuleResult):
            return _stopped(student, kernel)
        if _STRICTNESS[kernel.verdict] <= _STRICTNESS[student.verdict]:
            # As strict as the kernel, or stricter: the student's decision and rules stand, but
            # who approved is only ever what the kernel checked (a student cannot name an
            # approver or a key), and an escalation goes to the role the kernel names, if any.
            return dataclasses.replace(student, approver=kernel.approver, approver_key=kernel.approver_key,
                                       escalate_to=kernel.escalate_to or student.escalate_to)
        # Rationale: the kernel's verdict wins, and the record says the student missed it.
        missed = RuleResult("student.missed", kernel.verdict, f"your decide() answered {student.verdict!r}, "
                            f"but the kernel's preconditions {kernel.verdict}: {kernel.reason}",
                            {"student": {"verdict": student.verdict, "reason": student.reason}})
        return dataclasses.replace(kernel, reason=missed.reason, rules=[*student.rules, missed, *kernel.rules])


def _as_verdict(answer: Any) -> Verdict | RuleResult:
    """The student's decide() answer converted back strictly, or a student.failed refusal."""
    size = len(msgspec.json.encode(answer))
    if size > MAX_KEPT_BYTES:
        return _refusal("student.failed", f"your decide() returned a decision record of {size} bytes, more than "
                                          f"{MAX_KEPT_BYTES}; the step is refused (fail closed)")
    try:
        verdict = msgspec.convert(answer, Verdict, strict=True)
    except msgspec.ValidationError as exc:
        return _refusal("student.failed", f"your decide() returned {_shown(answer)}, not a Verdict ({exc}); "
                                          "the step is refused (fail closed)")
    bad = [v for v in [verdict.verdict, *(r.verdict for r in verdict.rules)] if v not in VERDICTS]
    if bad:
        return _refusal("student.failed", f"your decide() answered the verdict {_shown(bad[0])}; a verdict is one "
                                          f"of {', '.join(VERDICTS)}; the step is refused (fail closed)")
    return verdict


def _stopped(rule: RuleResult, kernel: Verdict) -> Verdict:
    """A refusal from the student's side, with the kernel's own record kept beside it."""
    return Verdict("refuse", rule.reason, rules=[rule, *kernel.rules])


def build(plug: Plug | None, timeout_s: float, plan: list[tuple[str, str]]) -> ActorPlug | None:
    """The actor's plug, or None when no student code replaces a piece of the actor."""
    if plug is None or plug.service != "actor":
        return None
    return ActorPlug(plug, StudentCode(plug.path, timeout_s), plan)

