"""Escalated steps waiting for a person, kept on disk so they survive an actor restart.

pending.jsonl is synced with the call log before the actor answers (Actor.sync), so an
email the broker records as `escalated` is still waiting here after a crash of the host.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

from airlock import trace


@dataclass(frozen=True)
class Escalation:
    message_id: str
    value: int | str
    sender: str
    step: int
    role: str
    # The task whose plan escalated it: only an actor running that task may resume it.
    # New fields get a default, so a line written before them still loads ("" here).
    task: str = ""
    # What proved the sender (airlock/senders.py); a line from before proofs is unverified.
    sender_proof: str = "none"


ESCALATION_FIELDS = {f.name for f in fields(Escalation)}
REQUIRED_FIELDS = {f.name for f in fields(Escalation) if f.default is MISSING}


class PendingStore:
    def __init__(self, path: Path) -> None:
        self.open: dict[str, Escalation] = {}
        for entry in trace.read(path):  # a torn last line (a crash mid-write) is skipped
            if entry.pop("resolved", False):
                self.open.pop(entry.get("message_id"), None)  # type: ignore[arg-type]
            elif REQUIRED_FIELDS <= entry.keys() <= ESCALATION_FIELDS:
                self.open[entry["message_id"]] = Escalation(**entry)
        self._file = trace.open_lines(path)
        self._dirty = False

    def add(self, escalation: Escalation) -> None:
        self.open[escalation.message_id] = escalation
        self._append(asdict(escalation))

    def resolve(self, message_id: str) -> None:
        if self.open.pop(message_id, None) is not None:
            self._append({"message_id": message_id, "resolved": True})

    def sync(self) -> None:
        if self._dirty:
            os.fsync(self._file.fileno())
            self._dirty = False

    def close(self) -> None:
        self.sync()
        self._file.close()

    def _append(self, entry: dict) -> None:
        self._file.write(json.dumps(entry).encode() + b"\n")
        self._file.flush()
        self._dirty = True

