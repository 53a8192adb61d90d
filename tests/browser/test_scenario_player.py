"""The guided scenario in a real browser, on the separated stack with recorded answers: the
first four steps play on order_status one email at a time, each card ending as its step
expects, the data-only one completing with the planted order; the fifth waits for the
guarded task with the command to switch, and the player keeps its place across a reload."""

from __future__ import annotations

import re

from tests.browser.conftest import skip_module_unless_browser

skip_module_unless_browser()

ARRIVE_MS = 30_000


def test_scenario_plays_step_by_step_and_waits_for_the_guarded_task(page, dashboard) -> None:
    """Steps 1-4 end as expected on order_status; step 5 shows the task switch and sends nothing."""
    from playwright.sync_api import expect

    page.goto(dashboard.url)
    expect(page.locator("#conn")).to_have_text("live")
    play = page.locator("#scenario-play")
    expect(play).to_be_enabled(timeout=ARRIVE_MS)
    play.click()
    step = page.locator("#scenario-step")
    for number in range(1, 5):
        expect(step).to_contain_text(f"Step {number} of 6")
        expect(step.locator(".scenario-line.good")).to_contain_text("as expected", timeout=ARRIVE_MS)
        sent = step.locator(".scenario-line", has_text="sent as").locator(".scenario-value").inner_text()
        card = page.locator(f'#col-actor .card[data-id="{sent}"]')
        expect(card.locator(".badge")).to_have_text("completed", timeout=ARRIVE_MS)
        if number == 4:  # the planted order, type-valid and in the email: the attack lands in the plan
            expect(card.locator(".call")).to_have_text(["shop/lookup_order(order_id=777777)",
                                                        "mail/send_status(order_id=777777)"])
        page.locator("#scenario-next").click()
    expect(step).to_contain_text("Step 5 of 6")
    switch = step.locator(".scenario-switch")
    expect(switch).to_contain_text("AIRLOCK_DEMO_TASK=order_status_guarded docker compose up -d")
    assert step.locator(".scenario-line", has_text="sent as").count() == 0  # it waits for the task
    expect(page.locator('.counter[data-key="outside_plan"] .n')).to_have_text("0")

    page.reload()  # the place is kept: the page restarts when the stack switches tasks
    expect(step).to_contain_text("Step 5 of 6", timeout=ARRIVE_MS)
    expect(switch).to_be_visible()
    page.select_option("#scenario-lang", "de")
    expect(step.locator(".scenario-look")).to_contain_text(re.compile("abgesicherte Aufgabe"))
    page.locator("#scenario-play").click()  # from the start again: step 1, sent once more
    expect(step).to_contain_text("Step 1 of 6")
    expect(step.locator(".scenario-line.good")).to_contain_text("as expected", timeout=ARRIVE_MS)
