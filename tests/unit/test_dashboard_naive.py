"""The page's naive pane over HTTP (a stub naive service) and its counters."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.errors import SettingsError
from dashboard import naive_pane
from dashboard.config import load as load_config
from dashboard.naive_pane import NaivePane, fetch_about, post_email
from dashboard.state import Board
from dashboard.stream import Hub, Refused

ROOT = Path(__file__).resolve().parents[2]
PLAN = [("shop", "lookup_order"), ("mail", "send_status")]
BIDI = "\u202e"
RUN_ANSWER = {"id": "m-1", "outcome": "completed", "reason": "", "answer": "shop/refund_all()",
              "calls": [{"step": 1, "server": "shop", "tool": "refund_all", "args": {}}], "ms": 1.0}


class StubService:
    """A naive service that answers what the test sets and remembers each POST."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.run_status, self.run_body = 200, json.dumps(RUN_ANSWER).encode()
        self.about_body = json.dumps({"model": f"smollm2 {BIDI}x", "constrained": True, "why": "w" * 1000}).encode()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stub.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self._send(stub.run_status, stub.run_body)

            def do_GET(self) -> None:  # http.server's naming
                self._send(200, stub.about_body) if self.path == "/about" else self._send(404, b"{}")

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[StubService]:
    service = StubService()
    try:
        yield service
    finally:
        service.close()


def test_each_email_is_posted_with_its_format_and_id(stub: StubService) -> None:
    """The pane POSTs the raw email with X-Airlock-Format and the page's id; the answer becomes an entry."""
    entry = post_email(stub.url, "m-1", b"Order 4411", "text", 5.0)
    headers, body = stub.posts[0]
    assert body == b"Order 4411" and headers["x-airlock-format"] == "text" and headers["x-airlock-id"] == "m-1"
    assert entry["status"] == "done" and entry["id"] == "m-1" and entry["calls"][0]["tool"] == "refund_all"


def test_an_id_the_service_would_refuse_is_not_sent(stub: StubService) -> None:
    """An id outside the service's pattern goes without X-Airlock-Id; the entry keeps the page's id."""
    entry = post_email(stub.url, "m 1/ü", b"x", "eml", 5.0)
    assert "x-airlock-id" not in stub.posts[0][0] and entry["id"] == "m 1/ü"


@pytest.mark.parametrize(("status", "body", "expected", "said"), [
    pytest.param(503, b'{"error": "busy"}', "skipped", "busy", id="busy"),
    pytest.param(413, b'{"error": "big"}', "error", "413", id="too-big"),
    pytest.param(200, b"not json", "error", "naive agent", id="not-json"),
    pytest.param(200, b"x" * (naive_pane.MAX_ANSWER_BYTES + 1), "error", "over", id="oversized"),
])
def test_a_refusal_or_a_bad_answer_is_an_entry_never_a_crash(stub: StubService, status: int, body: bytes,
                                                            expected: str, said: str) -> None:
    """Busy is skipped; any other status, or an answer that is not the line, is an error entry."""
    stub.run_status, stub.run_body = status, body
    entry = post_email(stub.url, "m-1", b"x", "text", 5.0)
    assert entry["status"] == expected and said in entry["reason"]


def test_a_service_that_is_not_there_is_an_error_entry() -> None:
    """Nothing listening: an error entry naming the service."""
    entry = post_email("http://127.0.0.1:9", "m-1", b"x", "text", 2.0)
    assert entry["status"] == "error" and entry["reason"].startswith("the naive service: refused")


def test_about_is_escaped_and_bounded(stub: StubService) -> None:
    """What the service says of its model reaches the page escaped and cut."""
    about = fetch_about(stub.url)
    assert about is not None and about["constrained"] is True
    assert BIDI not in about["model"] and "\\u202e" in about["model"]
    assert len(about["why"]) == naive_pane.ABOUT_TEXT_LIMIT
    stub.about_body = b'["no"]'
    assert fetch_about(stub.url) is None
    assert fetch_about("http://127.0.0.1:9") is None


def test_the_pane_over_http_runs_and_describes_the_service(stub: StubService) -> None:
    """With a service URL the pane is on, runs over HTTP and, once asked, says which model."""
    pane = NaivePane(None, 5.0, service_url=stub.url + "/")
    assert pane.enabled and pane.describe() == {"enabled": True, "reason": "", "via": "service", "about": None}
    told: list[dict[str, Any]] = []

    async def scenario() -> dict[str, Any]:
        await pane.watch_about(lambda: told.append(pane.describe()))
        return await pane.run("m-1", b"Order 4411", "text")

    entry = asyncio.run(scenario())
    assert entry["status"] == "done" and stub.posts
    assert told and told[0]["about"]["model"].startswith("smollm2")


def test_a_run_that_names_another_model_refreshes_the_pane(stub: StubService) -> None:
    """The service restarted with another model: the next run's answer names it, the pane asks /about again."""
    pane = NaivePane(None, 5.0, service_url=stub.url)
    told: list[str] = []

    async def scenario() -> None:
        await pane.watch_about(lambda: told.append(str((pane.about or {}).get("model"))))
        await pane.run("m-1", b"x", "text")  # the answer names no model: nothing asked
        stub.about_body = json.dumps({"model": "worst-case (obeys the email)", "constrained": False,
                                      "why": "obeys"}).encode()
        stub.run_body = json.dumps({**RUN_ANSWER, "model": "worst-case (obeys the email)"}).encode()
        entry = await pane.run("m-2", b"x", "text")
        assert "model" not in entry

    asyncio.run(scenario())
    assert [model.split()[0] for model in told] == ["smollm2", "worst-case"]


def test_the_subprocess_pane_has_no_service_to_describe() -> None:
    """Without a service URL nothing is fetched and describe() keeps its two keys."""
    pane = NaivePane(None, 5.0)
    asyncio.run(pane.watch_about(lambda: pytest.fail("no service to ask")))
    assert set(pane.describe()) == {"enabled", "reason"} and "AIRLOCK_NAIVE_URL" in pane.reason


@pytest.mark.parametrize("url", ["https://naive:8090", "ftp://naive", "http://naive:8090/run", "http://:8090",
                                 "http://naive:x", "http://u:p@naive:8090", "naive:8090"])
def test_a_bad_naive_url_names_the_setting(url: str) -> None:
    """AIRLOCK_NAIVE_URL must be http://host:port and nothing more."""
    with pytest.raises(SettingsError, match="AIRLOCK_NAIVE_URL"):
        load_config({"AIRLOCK_NAIVE_URL": url})


def test_a_good_naive_url_is_kept() -> None:
    """The compose lab's URL is taken as it is; unset is None."""
    assert load_config({"AIRLOCK_NAIVE_URL": "http://naive:8090/"}).naive_url == "http://naive:8090"
    assert load_config({}).naive_url is None


# --- the counters -------------------------------------------------------------------------


def done(entry_id: str, *pairs: tuple[str, str]) -> dict[str, Any]:
    return {"id": entry_id, "status": "done", "outcome": "completed",
            "calls": [{"step": n, "server": s, "tool": t, "args": {}} for n, (s, t) in enumerate(pairs, 1)]}


def test_naive_counters_count_each_run_once() -> None:
    """Emails run, calls made and calls outside the page's plan; running, skipped and repeats count nothing."""
    board = Board(PLAN)
    board.naive_update({"id": "m-1", "status": "running"})
    board.naive_update(done("m-1", ("shop", "lookup_order"), ("shop", "refund_all")))
    board.naive_update(done("m-1", ("shop", "lookup_order"), ("shop", "refund_all")))
    board.naive_update({"id": "m-2", "status": "skipped", "reason": "busy"})
    board.naive_update(done("m-3", ("shop", "lookup_order"), ("mail", "send_status")))
    assert board.naive_counters == {"emails": 2, "calls": 4, "outside_plan": 1}
    assert board.snapshot()["naive_counters"] == board.naive_counters


def test_a_replayed_call_is_shown_but_not_counted_as_made() -> None:
    """A call the naive agent's log already held (an id met again) is marked replayed on its run
    and adds nothing to calls made or to calls outside the plan."""
    board = Board(PLAN)
    run = done("m-9", ("shop", "lookup_order"), ("shop", "refund_all"))
    run["calls"][1]["replayed"] = True
    shown = board.naive_update(run)
    assert [c["replayed"] for c in shown["calls"]] == [False, True]
    assert board.naive_counters == {"emails": 1, "calls": 1, "outside_plan": 0}


def test_naive_counters_outlive_the_runs_kept() -> None:
    """Runs past the pane's limit are forgotten; what they counted stays."""
    from dashboard.state import NAIVE_LIMIT

    board = Board(PLAN)
    for number in range(NAIVE_LIMIT + 5):
        board.naive_update(done(f"m-{number}", ("shop", "refund_all")))
    assert len(board.naive) == NAIVE_LIMIT and board.naive_counters["outside_plan"] == NAIVE_LIMIT + 5


def test_the_naive_event_carries_the_counters_and_the_snapshot_too() -> None:
    """Each naive event holds the run and the pane's counters; a new page's snapshot has them."""
    hub = Hub(Board(PLAN), lambda: {"naive": {"enabled": True, "reason": ""}})
    opened = hub.subscribe("127.0.0.1")
    assert not isinstance(opened, Refused)
    subscriber, first = opened
    assert '"naive_counters":{"emails":0,"calls":0,"outside_plan":0}' in first
    hub.publish_naive(done("m-1", ("shop", "refund_all")))
    hub.publish_naive_pane({"enabled": True, "reason": "", "via": "service", "about": None})
    queued = [subscriber.queue.get_nowait() for _ in range(2)]  # (message, size) each
    sent = [item[0] for item in queued if item is not None]
    assert sent[0].startswith("event: naive\n")
    data = json.loads(sent[0].split("data: ", 1)[1])
    assert data["counters"] == {"emails": 1, "calls": 1, "outside_plan": 1} and data["run"]["id"] == "m-1"
    assert sent[1].startswith("event: naive_pane\n")


def test_the_page_draws_the_naive_counters_and_the_service_as_text() -> None:
    """index.html has the three naive counters; app.js fills them and the model's words by textContent."""
    html = (ROOT / "dashboard/static/index.html").read_text()
    script = (ROOT / "dashboard/static/app.js").read_text()
    for key in ("emails", "calls", "outside_plan"):
        assert f'data-naive-key="{key}"' in html
    assert "why.textContent = naive.about.why" in script and "naive.about.model" in script
    assert "addEventListener('naive_pane'" in script and "setNaiveCounters(update.counters)" in script
    assert "querySelectorAll('.counters .counter')" in script  # airlock's counters never touch the naive ones
