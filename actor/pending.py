"""Escalated steps waiting for a person, kept on disk so they survive an actor restart.

pending.jsonl is synced with the call log before the actor answers (Actor.sync), so an
email the broker records as `escalated` is still waiting here after a crash of the host.
Each line is written whole or not at all (actor/ledger.AppendLog): an escalation that could
not be stored raises LedgerWriteFailed and is not open, in memory or on disk.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import msgspec

from actor.ledger import AppendLog, LedgerWriteFailed
from airlock import tracefiles


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
        # Opened first: a torn last line (a crash mid-write) is cut off before the file is
        # read, so what is open here is what the file holds.
        self._log = AppendLog(path)
        self.open: dict[str, Escalation] = {}
        for entry in _entries(path):
            if entry.pop("resolved", False):
                if isinstance(message_id := entry.get("message_id"), str):  # a damaged id names nothing open
                    self.open.pop(message_id, None)
            elif REQUIRED_FIELDS <= entry.keys() <= ESCALATION_FIELDS:
                self.open[entry["message_id"]] = Escalation(**entry)

    def add(self, escalation: Escalation) -> None:
        """Open an escalation; raises LedgerWriteFailed (and nothing is open) if it cannot be stored."""
        self._log.append(json.dumps(asdict(escalation)).encode() + b"\n")
        self.open[escalation.message_id] = escalation

    def resolve(self, message_id: str) -> None:
        """Close it. If the disk refuses, it stays open here as on disk: a later decision for
        it only replays its steps (their keys are in the ledger), never runs them twice."""
        if message_id not in self.open:
            return
        try:
            self._log.append(json.dumps({"message_id": message_id, "resolved": True}).encode() + b"\n")
        except LedgerWriteFailed as exc:
            print(f"actor: the escalation of {message_id!r} stays open: {exc}", file=sys.stderr)
            return
        del self.open[message_id]

    def sync(self) -> None:
        """Raises LedgerWriteFailed (the unsynced lines cut out) if the fsync fails."""
        self._log.sync()

    def rollback(self) -> None:
        """Take back the lines since the last sync; the store must then be reloaded to be used."""
        self._log.rollback()

    def close(self) -> None:
        try:
            self.sync()
        finally:
            self._log.close()


_decode = msgspec.json.Decoder(dict[str, Any]).decode


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    """The file's JSON objects; a line that is none (damaged) is skipped."""
    for raw in tracefiles.lines_of(path):
        try:
            yield _decode(raw)
        except msgspec.DecodeError:
            continue
