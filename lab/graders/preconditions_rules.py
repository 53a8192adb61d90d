"""The rules the shipped actor runs (actor/preconditions.py), with the signatures of lab
preconditions' student file: what the decide checkpoint puts in place of the student's
rules, so that decide is judged alone. It is loaded in the student's confined process,
which may read the project's packages but not labs/, where the reference solution lives.
"""

from __future__ import annotations

from actor.preconditions import Approval, Fact, Principals, RuleResult, approval_rule, corroboration, evidence
from airlock.task import Precondition

__all__ = ["approval", "corroboration", "evidence"]


def approval(pre: Precondition, facts: dict[str, Fact], given: Approval | None, principals: Principals) -> RuleResult:
    return approval_rule(principals)(pre, facts, given)
