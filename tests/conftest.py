"""The test tiers (markers by folder, hypothesis profiles) and shared fixtures: settings on
free loopback ports, and a fake OpenAI-compatible model."""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from airlock import settings as settings_module
from ops.ports import free_ports  # the same helper the harness's private stacks use

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tasks"
CATALOG = (ROOT / "actor" / "catalog.toml").read_text()  # the shipped catalog, for tests to change

# The tiers (README, "Run the tests"). Each folder but unit/ is a tier with a marker of its
# name, applied here to every test collected there (a `pytestmark` in a conftest.py is ignored
# by pytest); tests/unit/test_tiers.py checks that every test carries its folder's marker.
TIER_FOLDERS = ("integration", "containers", "browser", "fuzz", "labs")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        if path.is_relative_to(TESTS) and (folder := path.relative_to(TESTS).parts[0]) in TIER_FOLDERS:
            item.add_marker(folder)


# Hypothesis profiles: "quick" by default, so the everyday command stays under a minute, and
# "deep" in CI (.ci/run exports HYPOTHESIS_PROFILE=deep; `--hypothesis-profile=deep` works
# too). Deep draws what every property test drew before the tiers existed (hypothesis's own
# 100 examples, and the fuzz tests' own larger counts); quick draws a quarter of that. Both
# check behaviour, not speed (the benchmark shows speed): on a machine shared with other labs
# one slow example must not fail a run with DeadlineExceeded.
DEEP_EXAMPLES, QUICK_EXAMPLES = 100, 25
hypothesis_settings.register_profile("deep", deadline=None, max_examples=DEEP_EXAMPLES)
hypothesis_settings.register_profile("quick", deadline=None, max_examples=QUICK_EXAMPLES)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def examples(deep: int) -> int:
    """Examples for a property test that draws `deep` under the deep profile, scaled by the
    profile loaded when the test module is imported (a quarter under quick)."""
    loaded = hypothesis_settings.default
    assert loaded is not None  # a profile is loaded above
    return max(1, deep * loaded.max_examples // DEEP_EXAMPLES)


def port_env(*names: str) -> dict[str, str]:
    """AIRLOCK_<NAME>_PORT for each name, each a free loopback port."""
    return {f"AIRLOCK_{name.upper()}_PORT": str(port) for name, port in zip(names, free_ports(len(names)), strict=True)}


def airlock_env(data_dir: Path, task: Path | None = None, **extra: str) -> dict[str, str]:
    env = port_env("intake", "reader", "validator", "actor", "trace")
    env["AIRLOCK_DATA_DIR"] = str(data_dir)
    env["AIRLOCK_TASK"] = str(task or ROOT / "tasks" / "order_status.toml")
    env.update(extra)
    return env


@pytest.fixture
def settings(tmp_path: Path) -> settings_module.Settings:
    return settings_module.load(airlock_env(tmp_path / "data"))


class FakeModel:
    """An OpenAI-compatible endpoint on loopback whose answer a test chooses.

    `reply(messages) -> str | None`: the text to answer; None means HTTP 500.
    `delay_s` makes it slow; `raw` sends a body that is not a chat completion. `props`: what
    GET /props answers, as llama.cpp's server does ({"total_slots": N}); None: 404, as others.
    """

    def __init__(self, reply: Callable[[list[dict[str, str]]], str | None]) -> None:
        self.reply, self.delay_s, self.raw = reply, 0.0, None
        self.requests: list[dict] = []
        self.props: dict | None = None
        self.props_status = 200  # another status: /props answers it (503: llama-server still loading)
        self.props_asked = 0
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's naming
                if self.path == "/props":
                    model.props_asked += 1
                if self.path != "/props" or model.props is None or model.props_status != 200:
                    self.send_error(404 if self.path != "/props" or model.props is None else model.props_status)
                    return
                payload = json.dumps(model.props).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append(body)
                time.sleep(model.delay_s)
                text = model.reply(body["messages"])
                if model.raw is not None:
                    payload, status = model.raw, 200
                elif text is None:
                    payload, status = b'{"error": "boom"}', 500
                else:
                    payload, status = json.dumps({"choices": [{"index": 0, "message": {
                        "role": "assistant", "content": text}}]}).encode(), 200
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _always(text: str) -> Callable[[list[dict[str, str]]], str]:
    return lambda _messages: text


@pytest.fixture
def fake_model() -> Iterator[Callable[..., FakeModel]]:
    models: list[FakeModel] = []

    def start(reply: Callable[[list[dict[str, str]]], str | None] | str) -> FakeModel:
        model = FakeModel(reply if callable(reply) else _always(reply))
        models.append(model)
        return model

    yield start
    for model in models:
        model.close()


def closed_port_url() -> str:
    """A URL where nothing listens: connection refused."""
    return f"http://127.0.0.1:{free_ports(1)[0]}"
