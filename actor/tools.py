"""Mock tools: each call appends one JSON line to calls.jsonl and does nothing else.

    {"message_id", "step", "server", "tool", "args", "at"}  (+ "to": a mail tool's recipient)

calls.jsonl is the ground truth of what airlock *did*; attack scoring reads it, never the
model's words. It is also the tools' idempotency ledger: a call whose key (message id and
step) is already in the file is not made again, the way a payment API honours an
idempotency key, so a replayed message never repeats a side effect.
"""

from __future__ import annotations

import os
import threading
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from actor.catalog import Tool
from airlock import trace
from airlock.trace import utc_now

ORDERS_PATH = Path(__file__).with_name("orders.toml")


def load_orders(path: Path = ORDERS_PATH) -> dict[str, dict[str, str]]:
    return tomllib.loads(path.read_text(encoding="utf-8")).get("orders", {})


def call_key(message_id: str, step: int) -> str:
    """The idempotency key of one step for one email: the executor reports it, the ledger
    honours it. One definition, so a replay can never miss its earlier call."""
    return f"{message_id}:{step}"


class ToolFailure(Exception):
    """The mock was told to fail (test catalogs only)."""


class CallLog:
    def __init__(self, path: Path, orders: dict[str, dict[str, str]] | None = None) -> None:
        # A torn last line is a call that never completed: trace.read skips it.
        self.done = {call_key(call["message_id"], call["step"]) for call in trace.read(path)
                     if isinstance(call.get("message_id"), str) and isinstance(call.get("step"), int)}
        self._file = trace.open_lines(path)
        self._encode = msgspec.json.Encoder().encode
        self._lock = threading.Lock()
        self._dirty = False
        self.orders = load_orders() if orders is None else orders

    def call(self, message_id: str, step: int, server: str, tool: str, args: dict[str, Any],
             student: str = "", to: str = "") -> bool:
        """Log one call; False (and nothing written) if its key was already logged. `student`
        names the lab plug point whose code took part in deciding it, `to` a mail tool's
        recipient (each kept only when set)."""
        key = call_key(message_id, step)
        with self._lock:
            if key in self.done:
                return False
            record = {"message_id": message_id, "step": step, "server": server, "tool": tool,
                      "args": args, "at": utc_now()}
            if to:
                record["to"] = to
            if student:
                record["student"] = student
            self._file.write(self._encode(record) + b"\n")
            self._file.flush()
            self._dirty = True
            self.done.add(key)
            return True

    def sync(self) -> None:
        """fsync what was logged since the last sync. The worker loop calls this before it
        sends any Done, so a step is on disk before it is acknowledged (group commit)."""
        with self._lock:
            if self._dirty:
                os.fsync(self._file.fileno())
                self._dirty = False

    def run(self, tool: Tool, message_id: str, step: int, args: dict[str, Any],
            cancelled: threading.Event, student: str = "") -> tuple[bool, dict[str, Any]]:
        """The mock tool: (made now, result). Misbehaviour comes from the catalog's mock."""
        if tool.mock.delay_s and cancelled.wait(tool.mock.delay_s):
            raise TimeoutError("cancelled before the side effect")
        if tool.mock.fail:
            raise ToolFailure(tool.mock.fail)
        made = self.call(message_id, step, tool.server, tool.tool, args, student, self.recipient(tool, args))
        return made, self.result(tool, args)

    def recipient(self, tool: Tool, args: dict[str, Any]) -> str:
        """Who a mail tool writes to: the order's owner from the store, whatever the email
        or its sender said; no owner is a failed call, never a guess ("" for a non-mail tool)."""
        if tool.mock.sends_to == "nobody":
            return ""
        order_id = _order_id(args)
        owner = (self.orders.get(order_id) or {}).get("customer")
        if not owner:
            raise ToolFailure(f"order {order_id!r} has no owner in the order store: nobody to write to")
        return owner

    def result(self, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
        if tool.mock.result_bytes:
            return {"blob": "x" * tool.mock.result_bytes}
        if tool.mock.returns == "order":
            order_id = _order_id(args)
            order = self.orders.get(order_id)
            return {"order_id": order_id, "found": order is not None, **(order or {"customer": None, "status": None})}
        return {"ok": True}

    def close(self) -> None:
        self.sync()
        self._file.close()


def _order_id(args: dict[str, Any]) -> str:
    """The order a call is about, one rule for the lookup and the mail's recipient: its
    `order_id` argument, else (a one-argument tool) its only argument."""
    return str(args.get("order_id", next(iter(args.values()), "")))
