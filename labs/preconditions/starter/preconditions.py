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

from actor.catalog import Tool
from actor.decisions import Approval, Fact, Principals, RuleResult, Verdict
from airlock import senders  # noqa: F401  for your corroboration: senders.normalized, senders.UNVERIFIED
from airlock.task import Precondition


def evidence(pre: Precondition, facts: dict[str, Fact], approval: Approval | None) -> RuleResult:
    """Allow when every field named in pre.evidence is in `facts` with a value that is
    neither None nor "", and, where pre.provenance names a lineage for the field, the fact's
    lineage is exactly that one. Otherwise refuse, with a reason that names the first field
    (in pre.evidence's order) that fails. read: {field: what was read, None if absent} for
    every field in pre.evidence. The rule's name is "evidence"."""
    raise NotImplementedError("TODO: write evidence")


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
    raise NotImplementedError("TODO: write corroboration")


def approval(pre: Precondition, facts: dict[str, Fact], given: Approval | None, principals: Principals) -> RuleResult:
    """A named person in pre.approver_role. No approval yet: escalate, with a reason naming
    the role. An approval whose role is not pre.approver_role, or whose `by` does not hold
    that role (principals.holds(by, role) is False): escalate as well, since it does not
    count. A listed holder who denied (approve False): refuse, naming them. A listed holder
    who approved: allow, naming them. read: {"role": pre.approver_role, "approval": what
    was given, None if nothing}. Name: "approval"."""
    raise NotImplementedError("TODO: write approval")


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
    raise NotImplementedError("TODO: write decide")
