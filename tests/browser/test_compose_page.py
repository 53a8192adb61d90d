"""The trainer's demonstration as a trainer meets it: `docker compose up` of the lab as shipped
(the naive agent on the lab's SmolLM2, its calls held to a grammar), the page in a real
browser, and the guided scenario played from its button, step by step, with both panes'
counters read after each step. Needs chromium and a Docker engine; the lab is this run's own
(tests/containers/lab.py) and is taken down, with its image tags, whatever happens."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import page_state, skip_module_unless_browser
from tests.conftest import ROOT
from tests.containers.conftest import fresh_lab, require_engine
from tests.containers.lab import Lab, run_lab
from tests.integration.conftest import wait_until

skip_module_unless_browser()

SCREENSHOT = ROOT / "docs" / "dashboard.png"  # the README's picture
PICTURE = {"width": 1680, "height": 1300}
LANGUAGES = ["EN", "NL", "DE", "RU", "TR"]
PLAYED_STEPS = 3  # the honest order, the injected tool call (the seed email), the marker
# Both the reader and the naive agent ask a CPU model on a machine other labs may share.
STEP_MS = 240_000
PAGE_READY_S = 180.0


def both_panes_ready(url: str) -> bool:
    """The page answers and the naive service has told it which model it has."""
    state = page_state(url)
    return bool(state and (state.get("naive") or {}).get("about"))


@pytest.fixture(scope="module")
def compose_lab(browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """This run's compose lab, with the naive agent's default model (not the container tests'
    worst-case one): the demonstration a trainer starts."""
    require_engine()
    import docker

    lab = fresh_lab(tmp_path_factory.mktemp("compose-page"))
    lab.env.pop("AIRLOCK_NAIVE_MODEL")  # compose.yaml's default: smollm2 with the grammar
    yield from run_lab(lab, lambda: docker.from_env(version="auto"))


def counter(page, selector: str) -> int:
    return int(page.locator(selector).inner_text())


def test_the_scenario_shows_the_naive_agent_acting_where_airlock_does_not(page, compose_lab, tmp_path: Path) -> None:
    """Steps 1-3 of the scenario from its button: each ends in airlock as the step expects with
    0 calls outside the plan, while the naive agent (SmolLM2, grammar) makes at least one; the
    ready emails list five languages and the pane says its model and the measured figures."""
    from playwright.sync_api import expect

    url = f"http://127.0.0.1:{compose_lab.env['AIRLOCK_DASHBOARD_PORT']}/"
    assert wait_until(lambda: both_panes_ready(url), PAGE_READY_S, every_s=1), \
        f"the page or the naive pane was not ready: {page_state(url)}"

    page.goto(url)
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#samples .sample-row .lang-tag")).to_have_text(LANGUAGES)
    status = page.locator("#naive-status")
    expect(status).to_contain_text(re.compile(r"Its model: .*SmolLM2.*grammar", re.IGNORECASE))
    expect(page.locator("#naive-why")).to_contain_text("grammar")
    shipped = json.loads((compose_lab.folder / "demo" / "measured.json").read_text())
    naive, airlock = shipped["naive"], shipped["airlock"]
    expect(page.locator("#naive-measured")).to_contain_text(
        f"of {naive['call_goals']} emails that ask for a call outside the plan, the naive agent (its calls held "
        f"to a grammar) made that call on {naive['call_goals_reached']}, airlock on {airlock['call_goals_reached']}")

    airlock_outside = '.counters .counter[data-key="outside_plan"] .n'
    naive_outside = "#naive-outside"
    play = page.locator("#scenario-play")
    expect(play).to_be_enabled()
    play.click()
    step = page.locator("#scenario-step")
    sent = ""  # the message id of the step played last
    for number in range(1, PLAYED_STEPS + 1):
        expect(step).to_contain_text(f"Step {number} of ")
        expect(step.locator(".scenario-line.good", has_text="as expected")).to_be_visible(timeout=STEP_MS)
        sent = step.locator(".scenario-line", has_text="sent as").locator(".scenario-value").inner_text()
        card = page.locator(f'#col-actor .card[data-id="{sent}"]')
        expect(card.locator(".badge")).to_have_text("completed")
        expect(card.locator(".call.outside")).to_have_count(0)
        expect(page.locator(airlock_outside)).to_have_text("0")
        # The naive agent answered the same email (not an error, not a run still waiting for its model).
        expect(page.locator(f'#naive .naive-run[data-id="{sent}"]')).to_have_class(re.compile(r"\bstatus-done\b"),
                                                                               timeout=STEP_MS)
        naive_key = page.locator(".scenario-key", has_text=re.compile("^naive agent$"))
        naive_line = step.locator(".scenario-line", has=naive_key)
        expect(naive_line).not_to_contain_text("running")
        if number < PLAYED_STEPS:  # the last one stays on the page for the picture
            page.locator("#scenario-next").click()

    assert counter(page, naive_outside) > 0, page.locator("#naive").inner_text()
    expect(page.locator("#naive .call.outside").first).to_contain_text("OUTSIDE THE PLAN")
    assert counter(page, airlock_outside) == 0
    expect(page.locator('.counters .counter[data-key="completed"] .n')).to_have_text(str(PLAYED_STEPS))

    page.set_viewport_size(PICTURE)  # tall enough for the naive pane's counters below its figures
    page.wait_for_timeout(1300)  # let the arrival highlight fade before the picture
    for shown in (".counters", "#scenario-step", f'#col-actor .card[data-id="{sent}"]', ".naive-counters"):
        box = page.locator(shown).bounding_box()
        assert box is not None and box["y"] + box["height"] <= PICTURE["height"], f"{shown} is not in the picture"
    # The README's picture is refreshed on request only, so a test run leaves the tree clean.
    target = SCREENSHOT if os.environ.get("AIRLOCK_UPDATE_SCREENSHOT") == "1" else tmp_path / "dashboard.png"
    page.screenshot(path=str(target))
    assert target.stat().st_size > 10_000
    page.goto("about:blank")  # off the page before the lab goes down: a cut stream is no page error
