"""Lab preconditions (seed 004): the wrapper between a schema-valid call and its side effect.

A call can fit its schema and still be the wrong call: the right tool, sent for somebody
else's order. Before a tool that reaches a third party and cannot be taken back, the actor
asks its preconditions, written down as data in the task file (airlock.task.Precondition):

    [[preconditions]]
    blast_radius = "third_party"          # the class of tools it attaches to
    reversibility = "irreversible"
    rules = ["evidence", "corroboration"] # run in this order; the first that does not allow decides
    evidence = ["sender", "order.customer"]
    provenance = { sender = "intake", "order.customer" = "order_store" }
    corroborate = ["sender", "order.customer"]
    min_sources = 2
    approver_role = "support-lead"        # for an "approval" rule

The facts are what the actor holds for one email, each a Fact(value, lineage, provenance):
"lineage" is the upstream the value was copied from (independence is counted on it),
"provenance" the step or channel that delivered it. Your functions are the rules and the
decision the actor's executor calls (the real one: `airlock lab check preconditions` runs
the guarded tasks through it with your code in its place).

Every rule returns a RuleResult(rule, verdict, reason, read): verdict "allow", "refuse" or
"escalate"; reason for the person who reads the trace; read the values the rule looked at,
so that months later the decision can be rebuilt. Each function is checked on its own.
"""

from __future__ import annotations

from typing import Any

from actor.catalog import Tool
from actor.decisions import Approval, Fact, Principals, RuleResult, Verdict
from airlock import senders
from airlock.task import Precondition


def _shown(fact: Fact | None) -> Any:
    return None if fact is None else {"value": fact.value, "lineage": fact.lineage, "provenance": fact.provenance}


def evidence(pre: Precondition, facts: dict[str, Fact], approval: Approval | None) -> RuleResult:
    """Allow when every field named in pre.evidence is in `facts` with a value that is
    neither None nor "", and, where pre.provenance names a lineage for the field, the fact's
    lineage is exactly that one. Otherwise refuse, with a reason that names the first field
    (in pre.evidence's order) that fails. read: {field: what was read, None if absent} for
    every field in pre.evidence. The rule's name is "evidence"."""
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
    """Independent sources that agree. Take the fields named in pre.corroborate that are in
    `facts` with a value (neither None nor "") and a lineage other than "unverified" (a
    claim nobody proved is no source). Two values agree when equal exactly, except that an
    address's domain ignores case: group by senders.normalized(text) for a text with an
    "@" (None: the text itself), never by casefold(), which merges distinct mailboxes.
    For each agreeing group count its distinct lineages: two fields copied from one
    upstream are ONE source. Allow when the biggest count is at
    least pre.min_sources, else refuse with a reason that gives the count. read: {field:
    what was read, None if absent} for every field in pre.corroborate. Name: "corroboration"."""
    read = {name: _shown(facts.get(name)) for name in pre.corroborate}
    lineages: dict[str, set[str]] = {}
    for name in pre.corroborate:
        fact = facts.get(name)
        if fact is not None and fact.value is not None and fact.value != "" and fact.lineage != senders.UNVERIFIED:
            text = str(fact.value)
            lineages.setdefault((senders.normalized(text) or text) if "@" in text else text, set()).add(fact.lineage)
    best = max((len(group) for group in lineages.values()), default=0)
    if best >= pre.min_sources:
        return RuleResult("corroboration", "allow", f"{best} independent sources agree", read)
    return RuleResult("corroboration", "refuse", f"{best} of {pre.min_sources} independent sources agree", read)


def approval(pre: Precondition, facts: dict[str, Fact], given: Approval | None, principals: Principals) -> RuleResult:
    """A named person in pre.approver_role. No approval yet: escalate, with a reason naming
    the role. An approval whose role is not pre.approver_role, or whose `by` does not hold
    that role (principals.holds(by, role) is False): escalate as well, since it does not
    count. A listed holder who denied (approve False): refuse, naming them. A listed holder
    who approved: allow, naming them. read: {"role": pre.approver_role, "approval": what
    was given, None if nothing}. Name: "approval"."""
    read = {"role": pre.approver_role,
            "approval": None if given is None else {"approve": given.approve, "role": given.role, "by": given.by}}
    if given is None:
        return RuleResult("approval", "escalate", f"needs approval by a {pre.approver_role}", read)
    if given.role != pre.approver_role or not principals.holds(given.by, pre.approver_role):
        return RuleResult("approval", "escalate", f"{given.by} is not a listed {pre.approver_role}", read)
    if not given.approve:
        return RuleResult("approval", "refuse", f"denied by {given.by} ({given.role})", read)
    return RuleResult("approval", "allow", f"approved by {given.by} ({given.role})", read)


def decide(preconditions: list[Precondition], tool: Tool, facts: dict[str, Fact], given: Approval | None,
           principals: Principals) -> Verdict:
    """The wrapper's decision for one call, with its record. A precondition applies to the
    tool when its blast_radius is None or the tool's, and its reversibility is None or the
    tool's. For each that applies, in order, run its rules in order ("evidence",
    "corroboration", "approval": your functions above) and append every RuleResult to
    verdict.rules. The first result that does not allow decides: verdict.verdict and
    verdict.reason are its own, verdict.escalate_to is pre.approver_role when it escalates,
    and no rule after it runs. A rule name you do not know refuses (fail closed) with a
    RuleResult of that name. When an approval rule allows, verdict.approver is
    f"{given.by} ({given.role})". Nothing applies: Verdict() allows, with no rules."""
    verdict = Verdict()
    for pre in preconditions:
        if pre.blast_radius not in (None, tool.blast_radius) or pre.reversibility not in (None, tool.reversibility):
            continue
        for name in pre.rules:
            if name == "evidence":
                result = evidence(pre, facts, given)
            elif name == "corroboration":
                result = corroboration(pre, facts, given)
            elif name == "approval":
                result = approval(pre, facts, given, principals)
            else:  # an unknown rule allows nothing
                result = RuleResult(name, "refuse", f"unknown precondition rule {name!r}")
            verdict.rules.append(result)
            if result.verdict == "allow":
                if name == "approval" and given is not None:
                    verdict.approver = f"{given.by} ({given.role})"
                continue
            verdict.verdict, verdict.reason = result.verdict, result.reason
            if result.verdict == "escalate":
                verdict.escalate_to = pre.approver_role
            return verdict
    return verdict
