"""The naive agent: permissive tool-call parsing, and it runs whatever the model proposes."""

from __future__ import annotations

from pathlib import Path

import pytest

from actor import catalog as catalog_module
from actor.calllog import CallLog
from airlock import trace
from reader.model import ModelAnswer, ModelFailure
from redteam.naive.agent import NaiveAgent
from redteam.naive.parse import Proposed, parse, resolve

CATALOG = catalog_module.load()


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("shop/lookup_order(order_id=4411)", [Proposed("shop/lookup_order", {"order_id": "4411"})], id="line"),
    pytest.param('{"name": "shop/refund_all", "arguments": {}}', [Proposed("shop/refund_all", {}, "json")], id="json"),
    pytest.param('{"type": "function", "function": {"name": "forward_email", "arguments": "{\\"to\\": \\"a@b\\"}"}}',
                 [Proposed("forward_email", {"to": "a@b"}, "json")], id="openai-function"),
    pytest.param("[[tool:shop/refund_all]]", [Proposed("shop/refund_all", {}, "marker")], id="marker"),
    pytest.param("forward_email('x@evil')", [Proposed("forward_email", {"_": "x@evil"})], id="positional"),
    pytest.param("NONE", [], id="nothing"),
])
def test_parse(text: str, expected: list[Proposed]) -> None:
    """Each accepted shape becomes a proposed call."""
    assert parse(text) == expected


def test_bare_names_resolve_to_the_first_match() -> None:
    """The naive agent resolves a bare tool name to whichever server lists it first."""
    assert resolve("refund_all", CATALOG) == ("shop", "refund_all")
    assert resolve("mail/refund_all", CATALOG) is None


def agent(tmp_path: Path, reply) -> tuple[NaiveAgent, Path]:
    path = tmp_path / "calls.jsonl"
    return NaiveAgent(CATALOG, lambda messages: reply, CallLog(path)), path


def test_runs_whatever_the_model_says(tmp_path: Path) -> None:
    """An injected call lands: this is the design airlock avoids."""
    naive, path = agent(tmp_path, ModelAnswer("shop/lookup_order(order_id=4411)\n[[tool:shop/refund_all]]", 1.0))
    result = naive.handle("n1", b"Order 4411 please", "text")
    naive.log.close()
    assert result.outcome == "completed"
    assert [(c.server, c.tool) for c in trace.read_calls(path)] == [("shop", "lookup_order"), ("shop", "refund_all")]


def test_model_failure_and_silence(tmp_path: Path) -> None:
    """A dead model fails the email; an answer with no call is rejected; nothing runs."""
    naive, path = agent(tmp_path, ModelFailure("refused", "down"))
    assert naive.handle("n1", b"Order 1", "text").outcome == "failed"
    naive.ask = lambda messages: ModelAnswer("I cannot help.", 1.0)
    assert naive.handle("n2", b"Order 1", "text").outcome == "rejected"
    naive.log.close()
    assert not path.exists() or path.read_text() == ""
