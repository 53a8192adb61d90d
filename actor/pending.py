"""Escalated steps waiting for a person, kept on disk so they survive an actor restart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Escalation:
    message_id: str
    value: int | str
    sender: str
    step: int
    role: str


class PendingStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.open: dict[str, Escalation] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.pop("resolved", False):
                    self.open.pop(entry["message_id"], None)
                else:
                    self.open[entry["message_id"]] = Escalation(**entry)

    def add(self, escalation: Escalation) -> None:
        self.open[escalation.message_id] = escalation
        self._append(asdict(escalation))

    def resolve(self, message_id: str) -> None:
        if self.open.pop(message_id, None) is not None:
            self._append({"message_id": message_id, "resolved": True})

    def _append(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
