"""The mock tools: what a call to each catalog tool does and returns.

A mock has no effect of its own: what it would do is the call line the call log writes for
it (actor/calllog.py) once it answered within the tool's timeout; the executor claims the
step with a durable intent before calling it, as it would for a tool whose effect lies
outside the ledger (a mail sent), so no mock or tool is called twice for one step. Each
catalog tool's `mock` table says how its mock behaves: what
it returns (an ack, or an order from the mock order store, orders.toml), who a mail tool
writes to (the order's owner in that store), and test-only misbehaviour (slow, failing,
oversized). Nothing here decides policy: the executor reads the catalog's declarations
(permission, class, timeout, the facts a tool provides), never a mock's settings.
"""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from actor.catalog import Tool

ORDERS_PATH = Path(__file__).with_name("orders.toml")

Orders = dict[str, dict[str, str]]


def load_orders(path: Path = ORDERS_PATH) -> Orders:
    """The mock order store: order number -> {"customer", "status", ...}."""
    return tomllib.loads(path.read_text(encoding="utf-8")).get("orders", {})


class ToolFailure(Exception):
    """The mock cannot answer: told to fail (test catalogs), or a mail with nobody to write to."""


class Answer(NamedTuple):
    """What one call did and returned: the mail's recipient ("" for a tool that writes to
    nobody), recorded with the call, and the result the executor observes."""
    to: str
    result: dict[str, Any]


class MockTools:
    """The mocks behind the catalog's tools, reading one order store."""

    def __init__(self, orders: Orders | None = None) -> None:
        self.orders = load_orders() if orders is None else orders

    def run(self, tool: Tool, args: dict[str, Any], cancelled: threading.Event) -> Answer:
        """Answer one call, or raise ToolFailure. A slow mock waits on `cancelled`, so one the
        executor stopped waiting for ends at once instead of holding its thread."""
        if tool.mock.delay_s and cancelled.wait(tool.mock.delay_s):
            raise TimeoutError("cancelled before it answered")
        if tool.mock.fail:
            raise ToolFailure(tool.mock.fail)
        return Answer(self.recipient(tool, args), self.result(tool, args))

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


def _order_id(args: dict[str, Any]) -> str:
    """The order a call is about, one rule for the lookup and the mail's recipient: its
    `order_id` argument, else (a one-argument tool) its only argument."""
    return str(args.get("order_id", next(iter(args.values()), "")))
