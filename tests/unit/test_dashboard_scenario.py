"""The page's scenario and ready emails over HTTP, without sockets: GET /api/scenario, a
step's email injected by its key, a bad or missing scenario file shown as an error while
the page still serves, and where the ready emails come from."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airlock import settings as settings_module
from airlock.wire import Email
from dashboard import inject
from dashboard.config import load as load_config

if TYPE_CHECKING:
    from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"
PLAN = [("shop", "lookup_order"), ("mail", "send_status")]

Client = Callable[..., "TestClient"]


@pytest.fixture
def page(settings: settings_module.Settings) -> Iterator[Client]:
    """A page for a demo folder (and, optionally, another samples folder)."""
    from starlette.testclient import TestClient  # needs httpx2, from the test extra

    from dashboard.app import create_app

    opened: list[TestClient] = []

    def make(demo: Path, samples: Path | None = None) -> TestClient:
        config = load_config({}, allowed_hosts=["testserver"], demo_dir=demo, samples_dir=samples)
        client = TestClient(create_app(settings, config, PLAN, live=False, task="order_status"))
        opened.append(client.__enter__())
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Email]:
    """What the page handed to the broker's intake, in order; each gets id-N back."""
    items: list[Email] = []

    def submit(settings: settings_module.Settings, item: Email) -> str:
        items.append(item)
        return f"id-{len(items)}"

    monkeypatch.setattr(inject, "submit", submit)
    return items


def test_scenario_endpoint_serves_the_shipped_scenario(page: Client) -> None:
    """The steps in order, each with its injection key, its email's label and its commands."""
    response = page(DEMO).get("/api/scenario")
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    steps = response.json()["steps"]
    assert [s["number"] for s in steps] == list(range(1, len(steps) + 1))
    assert steps[0]["sample"] == "demo/en_order.eml"
    assert steps[0]["label"] == inject.read_sample(DEMO / "emails" / "en_order.eml", "x").label
    assert steps[4]["commands"]["switch"] == "AIRLOCK_DEMO_TASK=order_status_guarded docker compose up -d"
    assert "{id} --as support-lead --by dana" in steps[-1]["commands"]["approve"]


def test_a_steps_email_is_injected_by_its_key(page: Client, sent: list[Email]) -> None:
    """POST /api/inject {"sample": "demo/<file>"} sends that file's exact bytes, named in the trace."""
    response = page(DEMO).post("/api/inject", json={"sample": "demo/en_data_only.eml"})
    assert response.status_code == 200 and response.json()["id"] == "id-1"
    assert sent[0].raw == (DEMO / "emails" / "en_data_only.eml").read_bytes()
    assert (sent[0].origin, sent[0].sender, sent[0].sender_proof) == (
        "dashboard:demo/en_data_only.eml", "mallory@example.net", "none")
    assert response.json()["label"].startswith("Data-only")


def test_only_scenario_emails_are_injectable_by_demo_key(page: Client, sent: list[Email]) -> None:
    """A demo/ key names a step's email only: no other file, no path out of the folder."""
    client = page(DEMO)
    for name in ("demo/nl_order.eml", "demo/../scenario.toml", "demo/../../README.md"):
        assert client.post("/api/inject", json={"sample": name}).status_code == 400, name
    assert sent == []


def test_ready_emails_carry_label_language_and_category(page: Client) -> None:
    """The snapshot lists the demo's emails with what the page shows beside each button."""
    samples = page(DEMO).get("/api/state").json()["samples"]
    assert [s["name"] for s in samples[:2]] == ["en_order.eml", "en_refund_damaged.eml"]
    by_name = {s["name"]: s for s in samples}
    assert by_name["ru_order.eml"]["lang"] == "ru" and by_name["ru_order.eml"]["category"] == "benign"
    assert by_name["tr_data_only.eml"]["category"] == "data-only"
    assert by_name["en_marker.eml"]["label"].startswith("Marker")


def test_samples_folder_replaces_the_list_but_not_the_scenario(page: Client, sent: list[Email]) -> None:
    """AIRLOCK_DASHBOARD_SAMPLES lists another folder; the scenario still plays the demo's emails."""
    client = page(DEMO, ROOT / "samples")
    names = [s["name"] for s in client.get("/api/state").json()["samples"]]
    assert names[0] == "seed_4411_de.eml" and "benign_en_order.eml" in names and "en_order.eml" not in names
    assert client.get("/api/scenario").status_code == 200
    assert client.post("/api/inject", json={"sample": "demo/en_order.eml"}).status_code == 200
    assert sent[0].raw == (DEMO / "emails" / "en_order.eml").read_bytes()


def copied_demo(tmp_path: Path) -> Path:
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo)
    return demo


@pytest.mark.parametrize(("edit", "step"), [
    pytest.param(lambda text: text.replace('outcome = "refused"', 'outcome = "maybe"'), 5, id="bad-outcome"),
    pytest.param(lambda text: text.replace('email = "en_marker.eml"', 'email = "gone.eml"'), 3, id="missing-email"),
    pytest.param(lambda text: text + "\n[[steps]\n", None, id="not-toml"),
    pytest.param(lambda text: text.replace('task = "refund_with_approval"', 'task = "refund_with_aproval"'), 6,
                 id="unknown-task"),
])
def test_bad_scenario_file_is_an_error_the_page_shows(page: Client, tmp_path: Path,
                                                      edit: Callable[[str], str], step: int | None) -> None:
    """A bad file: 422 with the error naming its step; the page, its state and its emails still serve."""
    demo = copied_demo(tmp_path)
    path = demo / "scenario.toml"
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    client = page(demo)
    response = client.get("/api/scenario")
    assert response.status_code == 422
    assert response.json()["step"] == step and str(path) in response.json()["error"]
    if step is not None:
        assert f"step {step}" in response.json()["error"]
    assert client.get("/").status_code == 200 and client.get("/api/state").json()["samples"]


def test_no_demo_folder_is_no_scenario_and_no_emails(page: Client, tmp_path: Path) -> None:
    """Without a demo folder: 404 with the reason, no ready emails, the page still serves."""
    client = page(tmp_path / "absent")
    response = client.get("/api/scenario")
    assert response.status_code == 404 and "no scenario file" in response.json()["error"]
    assert client.get("/api/state").json()["samples"] == []


def test_demo_folder_setting_and_its_samples_default(tmp_path: Path) -> None:
    """AIRLOCK_DASHBOARD_DEMO names the folder; its emails/ are listed unless AIRLOCK_DASHBOARD_SAMPLES is set."""
    default = load_config({})
    assert (default.demo_dir, default.samples_dir) == (DEMO, DEMO / "emails")
    moved = load_config({"AIRLOCK_DASHBOARD_DEMO": str(tmp_path)})
    assert (moved.demo_dir, moved.samples_dir) == (tmp_path, tmp_path / "emails")
    both = load_config({"AIRLOCK_DASHBOARD_DEMO": str(tmp_path), "AIRLOCK_DASHBOARD_SAMPLES": "/srv/mine"})
    assert (both.demo_dir, both.samples_dir) == (tmp_path, Path("/srv/mine"))
    assert load_config({}, demo_dir=tmp_path).samples_dir == tmp_path / "emails"
