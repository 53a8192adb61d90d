"""The mock tools alone (actor/mocks.py): what each call does and returns, with no ledger,
no file and no executor behind them."""

from __future__ import annotations

import threading
import time

import pytest

from actor import catalog as catalog_module
from actor.catalog import Mock, Tool
from actor.mocks import Answer, MockTools, ToolFailure, load_orders

CATALOG = catalog_module.load()
LOOKUP, SEND = CATALOG[("shop", "lookup_order")], CATALOG[("mail", "send_status")]
ORDERS = {"4411": {"customer": "kunde@example.de", "status": "shipped"}, "9": {"status": "lost"}}


def tool(mock: Mock | None = None) -> Tool:
    return Tool(server="t", tool="t", description="d", permission="read", blast_radius="internal",
                reversibility="reversible", mock=mock if mock is not None else Mock())


@pytest.fixture
def tools() -> MockTools:
    return MockTools(ORDERS)


def test_lookup_returns_the_order_from_the_store(tools: MockTools) -> None:
    """lookup_order answers the store's record, and `found: False` with nulls for a missing one."""
    assert tools.run(LOOKUP, {"order_id": "4411"}, threading.Event()) == Answer("", {
        "order_id": "4411", "found": True, "customer": "kunde@example.de", "status": "shipped"})
    assert tools.run(LOOKUP, {"order_id": "1"}, threading.Event()).result == {
        "order_id": "1", "found": False, "customer": None, "status": None}


def test_mail_goes_to_the_order_owner_never_a_guess(tools: MockTools) -> None:
    """send_status writes to the owner in the store; an order with no owner is a failed call."""
    assert tools.run(SEND, {"order_id": "4411"}, threading.Event()) == Answer("kunde@example.de", {"ok": True})
    for order_id in ("9", "404"):
        with pytest.raises(ToolFailure, match=f"order '{order_id}' has no owner"):
            tools.run(SEND, {"order_id": order_id}, threading.Event())


def test_a_one_argument_tool_is_about_its_only_argument(tools: MockTools) -> None:
    """Without an `order_id` argument, the order is the tool's only argument."""
    assert tools.recipient(tool(Mock(sends_to="order_owner")), {"number": "4411"}) == "kunde@example.de"
    assert tools.recipient(tool(), {"number": "4411"}) == ""


@pytest.mark.parametrize(("mock", "result"), [
    pytest.param(Mock(), {"ok": True}, id="ack"),
    pytest.param(Mock(result_bytes=5), {"blob": "xxxxx"}, id="oversized"),
])
def test_results(tools: MockTools, mock: Mock, result: dict) -> None:
    """An ack, or the oversized blob a test catalog asks for."""
    assert tools.run(tool(mock), {}, threading.Event()).result == result


def test_a_failing_mock_raises_tool_failure(tools: MockTools) -> None:
    """`fail` makes every call raise, with the catalog's words."""
    with pytest.raises(ToolFailure, match="disk full"):
        tools.run(tool(Mock(fail="disk full")), {}, threading.Event())


def test_a_slow_mock_stops_once_cancelled(tools: MockTools) -> None:
    """A slow mock waits on its cancel event: cancelled, it ends at once with no answer."""
    cancelled = threading.Event()
    threading.Timer(0.05, cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        tools.run(tool(Mock(delay_s=30.0)), {}, cancelled)
    assert time.monotonic() - started < 5
    assert tools.run(tool(Mock(delay_s=0.01)), {}, threading.Event()).result == {"ok": True}  # not cancelled: answers


def test_the_shipped_order_store_loads() -> None:
    """orders.toml is the store the mocks read by default."""
    assert MockTools().orders == load_orders() and load_orders()
