"""Mock tools: each call appends one JSON line to calls.jsonl and does nothing else.

    {"message_id", "step", "server", "tool", "args", "at"}

calls.jsonl is the ground truth of what airlock *did*; attack scoring reads it, never the
model's words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from airlock.trace import utc_now


class CallLog:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab")
        self._encode = msgspec.json.Encoder().encode

    def call(self, message_id: str, step: int, server: str, tool: str, args: dict[str, Any]) -> None:
        record = {"message_id": message_id, "step": step, "server": server, "tool": tool,
                  "args": args, "at": utc_now()}
        self._file.write(self._encode(record) + b"\n")
        self._file.flush()  # the line is on disk before the actor reports the call

    def close(self) -> None:
        self._file.close()
