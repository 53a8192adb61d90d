"""What one page and one client may cost the dashboard: the snapshot within the page's byte
budget whatever the emails hold, and the event streams shared fairly among clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from airlock import settings as settings_module
from bench.page import HIDDEN, PLAN, hostile_email  # the benchmark's hostile emails, measured there
from dashboard.config import MAX_STREAMS_PER_CLIENT, STREAM_BUFFER_BYTES, load as load_config
from dashboard.state import CUT_MARK, TEXT_LIMIT, Board
from dashboard.stream import Hub, Refused

if TYPE_CHECKING:
    from starlette.testclient import TestClient

def snapshot_of(first_event: str) -> dict[str, Any]:
    """The snapshot a page's first event carries."""
    data = next(line for line in first_event.splitlines() if line.startswith("data: "))
    return msgspec.json.decode(data.removeprefix("data: "))


def test_an_escaped_text_field_is_capped_in_escaped_characters() -> None:
    """A field of invisible characters is cut to TEXT_LIMIT characters as shown, never ten times that."""
    board = Board(PLAN)
    for record in hostile_email("m-1"):
        board.apply(record)
    card = board.cards["m-1"]
    for field in (card["answer"], card["excerpt"], card["reason"], card["verdict"]["reason"]):
        assert len(field) <= TEXT_LIMIT and field.startswith("\\U000e0041")


def test_a_cut_field_ends_on_a_whole_escape() -> None:
    """Cutting never leaves half an escape that would read as another character."""
    board = Board(PLAN)
    board.apply({"message_id": "m-1", "stage": "reader", "event": "model_answer", "answer": "a" + HIDDEN})
    answer = board.cards["m-1"]["answer"]
    body = answer.removesuffix(CUT_MARK)
    assert body != answer and (len(body) - 1) % len("\\U000e0041") == 0


def test_snapshot_stays_within_the_page_budget_with_hostile_emails() -> None:
    """500 emails of invisible characters: first event and /api/state within budget, newest card and counters kept."""
    budget = 512 * 1024
    hub = Hub(Board(PLAN), buffer_bytes=budget)
    for n in range(500):
        hub.publish(hostile_email(f"m-{n}"))
    opened = hub.subscribe("127.0.0.1")
    assert not isinstance(opened, Refused)
    first = opened[1]
    assert len(first.encode()) <= budget
    snapshot = snapshot_of(first)
    assert snapshot["counters"]["emails"] == 500 and snapshot["counters"]["rejected"] == 500
    assert snapshot["cards"][-1]["id"] == "m-499"
    assert snapshot["left_out"]["cards"] == 500 - len(snapshot["cards"]) > 0
    assert len(hub.state()) <= budget


def test_snapshot_keeps_every_waiting_card_first() -> None:
    """The cards waiting for a person are in the snapshot before newer finished ones."""
    hub = Hub(Board(PLAN), buffer_bytes=64 * 1024)
    hub.publish([{"at": "t", "message_id": "waiting", "stage": "broker", "event": "outcome",
                  "outcome": "escalated", "ended_at": "actor"}])
    for n in range(100):
        hub.publish(hostile_email(f"m-{n}"))
    ids = [card["id"] for card in msgspec.json.decode(hub.state())["cards"]]
    assert "waiting" in ids and "m-99" in ids and "m-0" not in ids


def test_one_client_opening_every_stream_cannot_lock_out_another() -> None:
    """A client past its share is refused; another client still gets a stream."""
    hub = Hub(Board(PLAN), max_streams=32, max_streams_per_client=8)
    greedy = [hub.subscribe("127.0.0.1") for _ in range(32)]
    opened = [page for page in greedy if not isinstance(page, Refused)]
    assert len(opened) == 8
    refused = greedy[-1]
    assert isinstance(refused, Refused) and refused.per_client
    assert not isinstance(hub.subscribe("192.0.2.7"), Refused)


def test_a_client_gets_its_share_back_when_its_streams_end() -> None:
    """A client's closed stream frees its slot in its share."""
    hub = Hub(Board(PLAN), max_streams=4, max_streams_per_client=1)
    first = hub.subscribe("192.0.2.7")
    assert not isinstance(first, Refused) and isinstance(hub.subscribe("192.0.2.7"), Refused)
    hub.unsubscribe(first[0])
    assert not isinstance(hub.subscribe("192.0.2.7"), Refused)


def test_the_total_still_caps_streams_across_clients() -> None:
    """Every client within its share, the total cap still holds, and its refusal says so."""
    hub = Hub(Board(PLAN), max_streams=2, max_streams_per_client=2)
    assert not isinstance(hub.subscribe("192.0.2.1"), Refused)
    assert not isinstance(hub.subscribe("192.0.2.2"), Refused)
    refused = hub.subscribe("192.0.2.3")
    assert isinstance(refused, Refused) and not refused.per_client


def test_an_ipv6_client_is_one_client_across_its_network() -> None:
    """Addresses of one /64 (one host's privacy addresses) share one share."""
    hub = Hub(Board(PLAN), max_streams=8, max_streams_per_client=1)
    assert not isinstance(hub.subscribe("2001:db8:1:2::a"), Refused)
    assert isinstance(hub.subscribe("2001:db8:1:2::b"), Refused)
    assert not isinstance(hub.subscribe("2001:db8:1:3::a"), Refused)


@pytest.fixture
def app(settings: settings_module.Settings, tmp_path: Path) -> Iterator[TestClient]:
    from starlette.testclient import TestClient  # needs httpx2, from the test extra

    from dashboard.app import create_app

    config = load_config({}, allowed_hosts=["testserver"], samples_dir=tmp_path)
    with TestClient(create_app(settings, config, PLAN, live=False)) as client:
        yield client


def test_state_endpoint_is_held_to_the_page_budget(app: TestClient) -> None:
    """GET /api/state after emails full of invisible characters stays within the page's budget."""
    hub = app.app.state.hub  # type: ignore[attr-defined]
    for n in range(60):
        hub.publish(hostile_email(f"m-{n}"))
    response = app.get("/api/state")
    assert response.status_code == 200 and len(response.content) <= STREAM_BUFFER_BYTES
    assert response.json()["counters"]["emails"] == 60 and response.json()["left_out"]["cards"] > 0


def test_events_refuses_a_client_past_its_share_with_retry_after(app: TestClient) -> None:
    """The route asks the hub with the peer's address: a client holding its share gets 503."""
    hub = app.app.state.hub  # type: ignore[attr-defined]
    for _ in range(MAX_STREAMS_PER_CLIENT):
        assert not isinstance(hub.subscribe("testclient"), Refused)  # TestClient's peer address
    response = app.get("/events")
    assert response.status_code == 503 and response.headers["retry-after"]
    assert "its share" in response.json()["error"]
