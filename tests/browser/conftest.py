"""Playwright driving Debian's chromium, headless, against `airlock up --dashboard`.

Skips with one line when the playwright package or /usr/bin/chromium is missing (the
playwright browser download does not work here: `apt-get install chromium`);
AIRLOCK_REQUIRE_BROWSER=1 turns that skip into a failure, so CI cannot pass without them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.hostile import TOOLS_PROMPT_SIGN  # how a model tells the naive agent's prompt
from tests.conftest import FakeModel, free_ports
from tests.integration.conftest import Stack, wait_until

CHROMIUM = Path(os.environ.get("AIRLOCK_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1680, "height": 1050}
# What the naive agent's model answers: the seed's real order, then the injected tool.
NAIVE_REPLY = "shop/lookup_order(order_id=4411)\nshop/alles_erstatten()"
DASHBOARD_UP_S = 30.0


def missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install playwright)"
    if not CHROMIUM.is_file():
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    return None


def skip_module_unless_browser() -> None:
    """One skip line for the whole module when the browser is missing (unless required)."""
    reason = missing()
    if reason is not None and os.environ.get("AIRLOCK_REQUIRE_BROWSER") != "1":
        pytest.skip(f"{reason}: browser tests skipped", allow_module_level=True)


@pytest.fixture(scope="module")  # not session: Playwright's loop must end before other tests use asyncio
def browser() -> Iterator[object]:
    reason = missing()
    if reason is not None:
        pytest.fail(f"{reason}: browser tests REQUIRED (AIRLOCK_REQUIRE_BROWSER=1)", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh page; console errors (a CSP violation, a script error) fail the test."""
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    tab.on("console", lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None)
    tab.problems = problems
    yield tab
    context.close()
    assert not [p for p in problems if "/events" not in p], problems  # a stream cut at shutdown is fine


@dataclass
class Dashboard:
    stack: Stack
    url: str
    model: FakeModel


def page_state(url: str) -> dict | None:
    """The page's GET /api/state, or None while it does not answer with JSON."""
    try:
        with urllib.request.urlopen(url + "api/state", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def answers(url: str) -> bool:
    return "plan" in (page_state(url) or {})


@pytest.fixture(scope="module")
def dashboard(browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """The separated stack with NO model (the reader answers from its recordings), its
    dashboard on a free port, and a fake model for the naive pane only."""
    model = FakeModel(lambda messages: NAIVE_REPLY if TOOLS_PROMPT_SIGN in (messages[0].get("content") or "").lower()
                      else None)
    port = free_ports(1)[0]
    stack = Stack(tmp_path_factory.mktemp("dashboard"), AIRLOCK_MODEL_URL="", AIRLOCK_NAIVE_MODEL_URL=model.url)
    try:
        stack.start("--dashboard", "--dashboard-port", str(port))
        url = f"http://127.0.0.1:{port}/"
        assert wait_until(lambda: answers(url), DASHBOARD_UP_S), \
            "the dashboard did not answer:\n" + "".join(stack.output)
        yield Dashboard(stack, url, model)
    finally:
        stack.stop()
        model.close()
