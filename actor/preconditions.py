"""Preconditions on consequential tools (taught in lab preconditions), evaluated in code before the call.

Data: facts the actor holds for one email, each with its value, its provenance (which
step or channel produced it) and its lineage (the upstream it was copied from): the
validated value (lineage email), the sender (lineage intake only when the SMTP intake
authenticated it, airlock/senders.py; else unverified), and what earlier plan steps
returned (lineage order_store for the order lookup).
Readers: the executor, for every step whose tool is in a precondition's class.
Rationale: a schema-valid call can still be the wrong call. Required evidence, independent
corroboration and a named approver are requirements written down, so each refusal is a
record (rules run, values read, which rule refused, who approved), not a hope in a prompt.

Each rule ends allow, refuse (with a reason) or escalate (to a named role). Rules run in
the declared order and the first that does not allow decides. An unknown rule name is a
configuration error: the actor does not start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actor.catalog import Tool
from actor.decisions import Approval, Fact, Principals, RuleResult, Verdict
from airlock import senders
from airlock.errors import CatalogError
from airlock.task import Precondition

__all__ = ["Approval", "Fact", "Gate", "Principals", "Rule", "RuleResult", "Verdict", "approval_rule",
           "corroboration", "evidence"]


def _shown(fact: Fact | None) -> Any:
    return None if fact is None else {"value": fact.value, "lineage": fact.lineage, "provenance": fact.provenance}


def evidence(pre: Precondition, facts: dict[str, Fact], approval: Approval | None) -> RuleResult:
    read = {name: _shown(facts.get(name)) for name in pre.evidence}
    for name in pre.evidence:
        fact = facts.get(name)
        if fact is None or fact.value is None or fact.value == "":
            return RuleResult("evidence", "refuse", f"required evidence '{name}' is missing", read)
        wanted = pre.provenance.get(name)
        if wanted and fact.lineage != wanted:
            return RuleResult("evidence", "refuse", f"'{name}' comes from {fact.lineage}, not {wanted}", read)
    return RuleResult("evidence", "allow", "", read)


def corroboration(pre: Precondition, facts: dict[str, Fact], approval: Approval | None) -> RuleResult:
    present = {name: facts[name] for name in pre.corroborate if name in facts and facts[name].value not in (None, "")}
    read = {name: _shown(facts.get(name)) for name in pre.corroborate}
    lineages_by_value: dict[str, set[str]] = {}
    for fact in present.values():
        if fact.lineage == senders.UNVERIFIED:
            continue  # a claim nobody proved is no source at all
        # Two fields copied from one upstream are one source, not two.
        lineages_by_value.setdefault(_compared(fact.value), set()).add(fact.lineage)
    best = max((len(lineages) for lineages in lineages_by_value.values()), default=0)
    if best >= pre.min_sources:
        return RuleResult("corroboration", "allow", f"{best} independent sources agree", read)
    # Names and lineages, never the values: this reason reaches the Result, the SMTP reply
    # and the page, and a value here is another customer's address (the record keeps it).
    shown = ", ".join(f"{name} ({fact.lineage})" for name, fact in present.items()) or "nothing"
    return RuleResult("corroboration", "refuse",
                      f"{best} of {pre.min_sources} independent sources agree: {shown}", read)


def _compared(value: Any) -> str:
    """Values agree only when equal exactly; an address only up to its domain's case and
    IDNA form (airlock/senders.py): casefolding would merge distinct mailboxes."""
    text = str(value)
    return (senders.normalized(text) or text) if "@" in text else text


def approval_rule(principals: Principals) -> Callable[[Precondition, dict[str, Fact], Approval | None], RuleResult]:
    def approval(pre: Precondition, facts: dict[str, Fact], given: Approval | None) -> RuleResult:
        read = {"role": pre.approver_role, "approval": None if given is None else
                {"approve": given.approve, "role": given.role, "by": given.by, "key": given.key}}
        if given is None:
            return RuleResult("approval", "escalate", f"needs approval by a {pre.approver_role}", read)
        if given.role != pre.approver_role or not principals.holds(given.by, given.role):
            return RuleResult("approval", "escalate", f"{given.by} is not a listed {pre.approver_role}", read)
        if not given.approve:
            return RuleResult("approval", "refuse", f"denied by {given.by} ({given.role})", read)
        return RuleResult("approval", "allow", f"approved by {given.by} ({given.role})", read)

    return approval


Rule = Callable[[Precondition, dict[str, Fact], "Approval | None"], RuleResult]


class Gate:
    """The preconditions of one task, checked against the rule registry at start."""

    def __init__(self, preconditions: list[Precondition], principals: Principals) -> None:
        self.rules: dict[str, Rule] = {"evidence": evidence, "corroboration": corroboration,
                                       "approval": approval_rule(principals)}
        for pre in preconditions:
            unknown = [name for name in pre.rules if name not in self.rules]
            if unknown:
                raise CatalogError(f"precondition rules {unknown} are unknown (known: {sorted(self.rules)})")
            if "approval" in pre.rules and not pre.approver_role:
                raise CatalogError("an approval rule needs approver_role")
        self.preconditions, self.principals = preconditions, principals

    def applies(self, pre: Precondition, tool: Tool) -> bool:
        return (pre.blast_radius in (None, tool.blast_radius)
                and pre.reversibility in (None, tool.reversibility))

    def check(self, tool: Tool, facts: dict[str, Fact], approval: Approval | None) -> Verdict:
        verdict = Verdict()
        for pre in self.preconditions:
            if not self.applies(pre, tool):
                continue
            for name in pre.rules:
                result = self.rules[name](pre, facts, approval)
                verdict.rules.append(result)
                if result.verdict == "allow":
                    if name == "approval" and approval is not None:
                        verdict.approver = f"{approval.by} ({approval.role})"
                        verdict.approver_key = approval.key
                    continue
                verdict.verdict, verdict.reason = result.verdict, result.reason
                if result.verdict == "escalate":
                    verdict.escalate_to = pre.approver_role
                return verdict
        return verdict
