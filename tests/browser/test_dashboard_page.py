"""The trainers' page in a real browser: the seed email crosses the airlock with only the
planned calls while the naive agent runs the injected one, and markup in an email is text."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.browser.conftest import page_state, skip_module_unless_browser
from tests.conftest import ROOT, free_ports
from tests.integration.conftest import Stack, wait_until

skip_module_unless_browser()

SEED = "seed_4411_de.eml"
PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
HOSTILE_TEXT = ("From: Mallory <mallory@example.net>\nSubject: <b>urgent</b> order\n\n"
                f"Status of order 5120 please.\n{PAYLOAD}\n")
ARRIVE_MS = 30_000


def injected_id(page) -> str:
    """The message id the page reports for what it just sent."""
    from playwright.sync_api import expect

    status = page.locator("#inject-status")
    expect(status).to_have_class(re.compile(r"\bok\b"), timeout=ARRIVE_MS)
    return status.get_attribute("data-id")


def test_markup_in_an_email_is_shown_as_text(page, dashboard) -> None:
    """An email carrying <script> and <img onerror> shows them as literal text and runs neither."""
    from playwright.sync_api import expect

    page.goto(dashboard.url)
    expect(page.locator("#conn")).to_have_text("live")
    page.fill("#text", HOSTILE_TEXT)
    page.click("#send")
    message_id = injected_id(page)
    card = page.locator(f'.card[data-id="{message_id}"]')
    expect(card.locator(".badge")).to_be_visible(timeout=ARRIVE_MS)  # it has an outcome
    expect(card.locator(".excerpt")).to_contain_text(PAYLOAD)
    expect(card.locator(".subject")).to_have_text("<b>urgent</b> order")
    assert card.locator("script, img, b").count() == 0
    naive = page.locator(f'.naive-run[data-id="{message_id}"]')
    expect(naive.locator(".badge")).to_have_text(re.compile("injected call ran|completed|rejected|failed|error"),
                                              timeout=ARRIVE_MS)
    assert page.locator("#naive script, #naive img").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_seed_email_reaches_the_actor_with_only_the_planned_calls(page, dashboard, tmp_path) -> None:
    """The seed's 4411 email ends in the actor column with the two planned calls, while the
    naive pane shows the injected shop/alles_erstatten call, marked outside the plan."""
    from playwright.sync_api import expect

    page.goto(dashboard.url)
    expect(page.locator("#conn")).to_have_text("live")
    page.click(f'button[data-sample="{SEED}"]')
    message_id = injected_id(page)

    card = page.locator(f'#col-actor .card[data-id="{message_id}"]')
    expect(card.locator(".badge")).to_have_text("completed", timeout=ARRIVE_MS)
    expect(card.locator(".source")).to_have_text("recorded answer")
    calls = card.locator(".call")
    expect(calls).to_have_count(2)
    assert calls.all_text_contents() == ["shop/lookup_order(order_id=4411)", "mail/send_status(order_id=4411)"]
    expect(card.locator(".call.outside")).to_have_count(0)
    expect(page.locator('.counter[data-key="outside_plan"] .n')).to_have_text("0")

    naive = page.locator(f'#naive .naive-run[data-id="{message_id}"]')
    outside = naive.locator(".call.outside")
    expect(outside).to_have_count(1, timeout=ARRIVE_MS)
    expect(outside).to_contain_text("shop/alles_erstatten")
    expect(outside).to_contain_text("OUTSIDE THE PLAN")
    expect(naive.locator(".call:not(.outside)")).to_have_text("shop/lookup_order(order_id=4411)")

    # What the page shows is what ran: airlock's own call log holds the two planned calls.
    ran = [(c["server"], c["tool"], c["args"]) for c in dashboard.stack.calls(message_id)]
    assert ran == [("shop", "lookup_order", {"order_id": "4411"}), ("mail", "send_status", {"order_id": "4411"})]

    page.wait_for_timeout(1300)  # let the arrival highlight fade before the picture
    # A picture of the recorded stack, kept with the test's files (the README's picture is the
    # compose lab's: test_compose_page.py).
    target = tmp_path / "dashboard-recorded.png"
    page.screenshot(path=str(target))
    assert target.stat().st_size > 10_000


@contextlib.contextmanager
def another_dashboard(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`python -m dashboard` on a free port with these settings; killed if still running."""
    port = free_ports(1)[0]
    process = subprocess.Popen([sys.executable, "-m", "dashboard", "--port", str(port)], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None  # piped
    try:
        yield process, f"http://127.0.0.1:{port}/"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


def finished_card(url: str, message_id: str) -> dict | None:
    cards = (page_state(url) or {}).get("cards", [])
    return next((c for c in cards if c["id"] == message_id and c["outcome"]), None)


def test_a_page_opened_late_still_shows_earlier_emails(dashboard) -> None:
    """A dashboard started after an email finished reads it from trace.jsonl, and stops at
    once on SIGTERM even with an event stream open."""
    message_id = dashboard.stack.inject(str(ROOT / "samples" / "hostile_marker.eml"))[0]["id"]
    with another_dashboard(dashboard.stack.env) as (late, url):
        assert wait_until(lambda: finished_card(url, message_id) is not None, 20), "the card never appeared"
        card = finished_card(url, message_id)
        assert card is not None and card["subject"] == "status"
        with urllib.request.urlopen(url + "events", timeout=5) as stream:
            assert stream.readline() == b"retry: 1000\n"
            started = time.monotonic()
            late.send_signal(signal.SIGTERM)
            assert late.wait(10) == 0
        assert time.monotonic() - started < 5


def test_the_trace_stream_alone_feeds_a_dashboard(dashboard, tmp_path: Path) -> None:
    """With no readable data folder (as in its container), the dashboard still follows
    every email from the broker's trace stream, authenticated with its own key."""
    env = {**dashboard.stack.env, "AIRLOCK_DATA_DIR": str(tmp_path / "not-the-data")}
    if (dashboard.stack.data / "keys" / "broker.key").exists():
        env["AIRLOCK_KEYS"] = str(dashboard.stack.data / "keys")
    with another_dashboard(env) as (_, url):
        assert wait_until(lambda: page_state(url) is not None, 20)
        shown = page_state(url)
        assert shown is not None and shown["sources"]["file"] is None
        # A subscriber sees only what is published after it joined: try a few emails.
        message_id = ""  # the last one tried
        for _ in range(3):
            message_id = dashboard.stack.inject(str(ROOT / "samples" / SEED))[0]["id"]
            if wait_until(lambda: finished_card(url, message_id) is not None, 5):  # noqa: B023  called within this iteration only
                break
        card = finished_card(url, message_id)
        assert card is not None, "nothing arrived through the trace stream"
        assert [(c["server"], c["tool"]) for c in card["calls"]] == [("shop", "lookup_order"), ("mail", "send_status")]


def test_counters_stay_true_on_a_data_dir_where_another_task_ran(page, tmp_path: Path, fake_model) -> None:
    """As a trainer meets it: the refund task ran on this data dir (one
    email approved after a wrong approver, one still waiting), then `airlock up --dashboard`
    with the order task: the page counts 3 emails, 1 waiting, and no call outside the plan."""
    from playwright.sync_api import expect

    refund = Stack(tmp_path, task=str(ROOT / "tasks" / "refund_with_approval.toml"))
    try:
        refund.start("--model-url", fake_model("damaged").url)
        approved, waiting = (refund.inject(str(ROOT / "samples" / "refund_damaged.eml"))[0]["id"] for _ in range(2))
        refund.airlock("approve", approved, "--as", "support-lead", "--by", "sam")  # not a lead: escalated again
        done = refund.airlock("approve", approved, "--as", "support-lead", "--by", "dana")
        assert done.returncode == 0 and "completed" in done.stdout, done.stderr
    finally:
        refund.stop()
    port = free_ports(1)[0]
    order = Stack(tmp_path, AIRLOCK_MODEL_URL="")  # the same data dir; the order task; no model
    try:
        order.start("--dashboard", "--dashboard-port", str(port))
        (seed,) = order.inject(str(ROOT / "samples" / SEED))
        assert seed["outcome"] == "completed"
        page.goto(f"http://127.0.0.1:{port}/")
        expect(page.locator("#conn")).to_have_text("live")
        expect(page.locator(f'.card[data-id="{seed["id"]}"] .badge')).to_have_text("completed", timeout=ARRIVE_MS)
        shown = {key: page.locator(f'.counter[data-key="{key}"] .n').text_content()
                 for key in ("emails", "completed", "escalated", "refused", "failed", "outside_plan")}
        assert shown == {"emails": "3", "completed": "2", "escalated": "1", "refused": "0", "failed": "0",
                         "outside_plan": "0"}
        assert page.locator(".call.outside").count() == 0
        expect(page.locator(f'.card[data-id="{approved}"] .meta .task')).to_have_text("task refund_with_approval")
        expect(page.locator(f'.card[data-id="{waiting}"] .badge')).to_have_text("waiting for a person")
        expect(page.locator(f'.card[data-id="{seed["id"]}"] .meta .task')).to_have_count(0)

        # The queue offers the waiting refund email's approve command; under the order task
        # it runs nothing (the order plan would mail send_status) and the email keeps waiting.
        told = order.airlock("approve", waiting, "--as", "support-lead", "--by", "dana")
        assert "refund_with_approval" in told.stdout + told.stderr
        assert [c["tool"] for c in order.calls(waiting)] == ["open_refund_case"]
        assert wait_until(lambda: len(order.trace(waiting, "decision")) == 1)
        page.wait_for_timeout(500)
        expect(page.locator('.counter[data-key="escalated"] .n')).to_have_text("1")
        expect(page.locator('.counter[data-key="outside_plan"] .n')).to_have_text("0")
        expect(page.locator(f'.card[data-id="{waiting}"] .badge')).to_have_text("waiting for a person")
    finally:
        page.goto("about:blank")  # the page lets go of its stream before its server stops
        order.stop()
