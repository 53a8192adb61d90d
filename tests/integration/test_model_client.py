"""The reader's model client against real HTTP on loopback, and `airlock record`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reader.model import ModelAnswer, ModelFailure, ask, completions_url
from tests.conftest import ROOT, closed_port_url

MESSAGES = [{"role": "user", "content": "Order 4411"}]


def test_answer(fake_model) -> None:
    """A chat completion's content comes back as the answer, with the request we expect."""
    model = fake_model("4411")
    result = ask(model.url, "smollm2", MESSAGES, 5)
    assert isinstance(result, ModelAnswer) and result.text == "4411"
    (request,) = model.requests
    assert request["messages"] == MESSAGES and request["temperature"] == 0 and request["max_tokens"] > 0


@pytest.mark.parametrize(("setup", "kind"), [
    pytest.param(lambda m: setattr(m, "delay_s", 2), "timeout", id="slow"),
    pytest.param(lambda m: setattr(m, "reply", lambda _: None), "http_error", id="http-500"),
    pytest.param(lambda m: setattr(m, "raw", b"<html>not json</html>"), "bad_body", id="not-json"),
    pytest.param(lambda m: setattr(m, "raw", b'{"choices": []}'), "bad_body", id="no-choices"),
    pytest.param(lambda m: setattr(m, "raw", b'{"choices": [{"message": {"content": null}}]}'), "bad_body",
                 id="null-content"),
    pytest.param(lambda m: setattr(m, "raw", b"[" * 2_000_000), "bad_body", id="huge-body"),
])
def test_each_failure_is_a_typed_value(fake_model, setup, kind: str) -> None:
    """Slow, failing or nonsensical endpoints give a ModelFailure of the right kind."""
    model = fake_model("4411")
    setup(model)
    result = ask(model.url, "smollm2", MESSAGES, 0.5)
    assert isinstance(result, ModelFailure) and result.kind == kind, result


def test_refused() -> None:
    """Nothing listening is `refused`."""
    result = ask(closed_port_url(), "smollm2", MESSAGES, 1)
    assert isinstance(result, ModelFailure) and result.kind == "refused"


@pytest.mark.parametrize(("base", "url"), [
    ("http://m:8080", "http://m:8080/v1/chat/completions"),
    ("http://m:8080/v1/", "http://m:8080/v1/chat/completions"),
    ("http://m/v1/chat/completions", "http://m/v1/chat/completions"),
])
def test_completions_url(base: str, url: str) -> None:
    """--model-url may be the server, its /v1, or the full endpoint."""
    assert completions_url(base) == url


def test_record_writes_real_answers_that_the_reader_then_uses(fake_model, tmp_path: Path) -> None:
    """`airlock record` stores the live answer under the prompt digest; failures are not stored."""
    task = tmp_path / "task.toml"
    task.write_text((ROOT / "tasks" / "order_status.toml").read_text().replace(
        "../samples/recorded/order_status.jsonl", "recorded.jsonl"))
    emails = tmp_path / "emails"
    emails.mkdir()
    shutil.copy(ROOT / "samples" / "seed_4411_de.eml", emails)
    model = fake_model("4411")
    done = subprocess.run([sys.executable, "-m", "airlock", "record", "--model-url", model.url,
                           "--task", str(task), str(emails)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = (tmp_path / "recorded.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["answer"] == "4411" and record["origin"] == "seed_4411_de.eml" and len(record["digest"]) == 64
    failed = subprocess.run([sys.executable, "-m", "airlock", "record", "--model-url", closed_port_url(),
                             "--task", str(task), str(emails)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert failed.returncode == 1 and "FAIL" in failed.stdout
    assert (tmp_path / "recorded.jsonl").read_text().splitlines() == [line]
