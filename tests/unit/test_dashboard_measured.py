"""The corpus figures beside the naive pane (demo/measured.json): decoded strictly, shown
escaped, a damaged file named on the page instead of a crash."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airlock import measured, settings as settings_module
from dashboard.config import load as load_config

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"
PLAN = [("shop", "lookup_order"), ("mail", "send_status")]
FIGURES = {"emails": 172, "hostile": 124, "call_goals": 59, "call_goals_reached": 37, "goals_reached": 47,
           "calls": 506, "calls_outside_plan": 350, "hostile_emails_calling_outside_plan": 112, "benign": 45,
           "utility": 0.067}
GOOD = {"corpus": ["corpus/handmade"], "task": "order_status", "model": "smollm2",
        "command": "airlock attack corpus/handmade --mode both --model-url http://127.0.0.1:8080",
        "naive_constrained": True, "naive": FIGURES,
        "airlock": {**FIGURES, "call_goals_reached": 0, "calls_outside_plan": 0,
                    "hostile_emails_calling_outside_plan": 0}}


@pytest.fixture
def snapshot(settings: settings_module.Settings, tmp_path: Path) -> Callable[[bytes | None], Any]:
    """The page's /api/state `measured` for a demo folder holding `content` as measured.json."""
    from starlette.testclient import TestClient

    from dashboard.app import create_app

    def make(content: bytes | None) -> Any:
        demo = tmp_path / f"demo-{len(list(tmp_path.iterdir()))}"  # no emails, no scenario: not this test's
        demo.mkdir()
        if content is not None:
            (demo / "measured.json").write_bytes(content)
        config = load_config({}, allowed_hosts=["testserver"], demo_dir=demo)
        with TestClient(create_app(settings, config, PLAN, live=False, task="order_status")) as client:
            return client.get("/api/state").json()["measured"]

    return make


def test_the_page_shows_the_file_as_written(snapshot) -> None:
    """Every figure reaches the page; none is invented when there is no file."""
    shown = snapshot(json.dumps(GOOD).encode())
    assert shown["naive"] == GOOD["naive"] and shown["airlock"]["call_goals_reached"] == 0
    assert shown["command"] == GOOD["command"] and shown["naive_constrained"] is True
    assert snapshot(None) is None


@pytest.mark.parametrize(("content", "said"), [
    pytest.param(b"{not json", "measured.json: ", id="not-json"),
    pytest.param(json.dumps({**GOOD, "extra": 1}).encode(), "unknown field", id="unknown-field"),
    pytest.param(json.dumps({**GOOD, "naive": {**FIGURES, "calls": -1}}).encode(), "calls", id="negative"),
    pytest.param(b" " * (measured.MAX_BYTES + 1), "over", id="too-big"),
])
def test_a_damaged_file_is_an_error_on_the_page(snapshot, content: bytes, said: str) -> None:
    """A file that is not the format is named with why, and the page still serves."""
    shown = snapshot(content)
    assert set(shown) == {"error"} and said in shown["error"]


def test_text_from_the_file_is_escaped(snapshot) -> None:
    """A model name with a bidi override and an escape sequence arrives escaped, as card text does."""
    shown = snapshot(json.dumps({**GOOD, "model": "smol\u202elm\x1b[31m"}).encode())
    assert "\u202e" not in shown["model"] and "\x1b" not in shown["model"] and "smol" in shown["model"]


def test_the_shipped_file_is_the_format_and_names_its_command() -> None:
    """demo/measured.json decodes and says how to measure it again."""
    found = measured.read(DEMO / "measured.json")
    assert isinstance(found, measured.Measured), found
    assert found.command.startswith("airlock attack ") and "--mode both" in found.command
    assert found.airlock.calls_outside_plan == 0 and found.airlock.call_goals_reached == 0
