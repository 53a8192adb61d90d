"""The values a precondition decision is made of: facts, an approval, the principals, each
rule's result and the verdict with its record. Types only, no rule: a lab's starter imports
them from here, so it never imports the module whose functions are its answer
(actor/preconditions.py holds the rules and re-exports these names).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from airlock.errors import CatalogError


@dataclass(frozen=True)
class Fact:
    value: Any
    lineage: str  # the upstream this value was copied from; independence is counted on it
    provenance: str  # the step or channel that delivered it


@dataclass(frozen=True)
class Approval:
    approve: bool
    role: str
    by: str
    key: str = ""  # the public key the broker proved `by` with (wire.Decision); "" in tests of rules alone


@dataclass
class RuleResult:
    rule: str
    verdict: str  # allow, refuse, escalate
    reason: str = ""
    read: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    verdict: str = "allow"
    reason: str = ""
    escalate_to: str = ""
    approver: str = ""
    approver_key: str = ""  # the key that proved the approver (the broker checked it), when one did
    rules: list[RuleResult] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """The decision record for the trace: rules run, values read, who decided."""
        refused_by = next((r.rule for r in self.rules if r.verdict != "allow"), None)
        return {"verdict": self.verdict, "reason": self.reason, "refused_by": refused_by,
                "escalated_to": self.escalate_to or None, "approver": self.approver or None,
                **({"approver_key": self.approver_key} if self.approver_key else {}),
                "rules": [{"rule": r.rule, "verdict": r.verdict, "reason": r.reason, "read": r.read}
                          for r in self.rules]}


class Principals:
    """Named people and their roles; an approval counts only from a listed name in its role."""

    def __init__(self, roles: dict[str, set[str]]) -> None:
        self.roles = roles

    @classmethod
    def load(cls, path: Path | None) -> Principals:
        if path is None:
            return cls({})
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            people = msgspec.convert(data.get("principals", []), list[dict[str, Any]], strict=True)
            return cls({p["name"]: set(p["roles"]) for p in people})
        except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError, KeyError, TypeError) as exc:
            raise CatalogError(f"principals file {path}: {exc}") from exc

    def holds(self, name: str, role: str) -> bool:
        return role in self.roles.get(name, set())
