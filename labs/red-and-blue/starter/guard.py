"""Lab red-and-blue, the blue half: the guard that makes your own attacks fail.

Your attacks never broke the separation: the value was 1-6 ASCII digits, the plan ran as
declared. They were data-only attacks: a type-valid value that is the wrong one. No
checker of the value alone can tell a stranger's order from the sender's own; the order
store can. The guard is declared as data, in the task, as [[preconditions]] (seed 004):
before a tool of a given class runs, rules check evidence, corroboration by independent
lineage, or a named approver. The actor runs them in its executor and refuses, with a
reason in the decision record, when one does not allow.

preconditions() returns the list of [[preconditions]] tables to add to
tasks/order_status.toml, each a dict with the keys of airlock.task.Precondition:

    rules          the rules to run, in order: "evidence", "corroboration", "approval"
    blast_radius   "internal" or "third_party": the class of tools it applies to (optional)
    reversibility  "reversible" or "irreversible" (optional)
    evidence       fields that must be present: "sender", "order.customer", "value", ...
    provenance     {field: the lineage it must come from}: "intake", "order_store", "email"
    corroborate    fields that must agree...
    min_sources    ...across this many independent lineages
    approver_role  the role whose holder must approve (for "approval")

The facts the actor holds for one email: "sender" (the address the intake vouched for,
lineage intake), "value" (the validated value, lineage email) and, after the lookup,
"order.customer" and "order.status" (lineage order_store). mail/send_status is a
third_party, irreversible tool; shop/lookup_order is internal and reversible.

The check runs your attacks and the corpus's data-only attacks with your guard (none may
send for a stranger's order), and the corpus's honest customers (each must still get the
status of their own order). A guard declares only what the actor checks: a field it does
not hold, or a list whose rule is not in `rules`, is a requirement nobody enforces, and named.
"""

from __future__ import annotations

from typing import Any


def preconditions() -> list[dict[str, Any]]:
    """The [[preconditions]] that refuse a status for somebody else's order and keep
    answering honest customers."""
    raise NotImplementedError("TODO: write preconditions")
