"""The model timeout is one deadline per email, whatever the model server does: a server that
drips its status line, its headers or its body (chunked or with a Content-Length) a byte at a
time is abandoned at the deadline, the recorded answer is used, and the reader serves on."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from airlock import settings as settings_module, task as task_module
from airlock.wire import Read, Reading
from ops import preflight
from reader import model
from reader.app import build
from reader.ask import Asker
from tests.conftest import ROOT

SEED = ROOT / "samples" / "seed_4411_de.eml"
MESSAGES = [{"role": "user", "content": "Order 4411"}]
DEADLINE_S = 1.0
SLACK_S = 0.5  # thread start, socket shutdown, a busy test machine
GIVE_UP_AFTER_S = 10.0  # a test waits this long past the deadline before it calls the request hung
DRIP_EVERY_S = 0.02  # one byte this often: every read returns before a per-read timeout would
STACK_EMAIL_S = 10.0  # one email through a stack whose model times out: the deadline, a CLI start, the rest

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
# What each server sends at once, then the endless bytes it drips one at a time.
SHAPES: dict[str, tuple[bytes, bytes]] = {
    "status-line": (b"", b"HTTP/1.1 200 OK"),
    "headers": (OK, b"X-Drip: a\r\n"),
    "body-chunked": (OK + b"Transfer-Encoding: chunked\r\n\r\n", b"1\r\n \r\n"),
    "body-content-length": (OK + b"Content-Length: 100000000\r\n\r\n", b" "),
}

T = TypeVar("T")


class DripServer:
    """A model endpoint on loopback that reads a request, sends `prefix`, then drips `filler`
    (repeated) a byte at a time until the client goes or the server stops."""

    def __init__(self, prefix: bytes, filler: bytes) -> None:
        self.prefix, self.filler = prefix, filler
        self.requests = 0
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.requests += 1
            thread = threading.Thread(target=self._drip, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)  # the request (small: headers and a short JSON body)
                conn.sendall(self.prefix)
                for byte in itertools.cycle(self.filler):
                    if self.stopping.wait(DRIP_EVERY_S):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the client closed: it gave up, as it should

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=2)


@pytest.fixture
def drip() -> Iterator[Callable[[str], DripServer]]:
    servers: list[DripServer] = []

    def start(shape: str) -> DripServer:
        servers.append(DripServer(*SHAPES[shape]))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """The call's result and how long it took; a call still running well past the deadline
    fails the test (in a thread of its own, so a hung call cannot hang the test run)."""
    results: list[T] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    thread.join(DEADLINE_S + GIVE_UP_AFTER_S)
    took = time.monotonic() - started
    assert results, f"still waiting for the model {took:.1f} s after the call, with a {DEADLINE_S} s timeout"
    return results[0], took


@pytest.mark.parametrize("shape", SHAPES)
def test_a_dripping_server_is_a_timeout_at_the_deadline(drip, shape: str) -> None:
    """Whatever part of its answer the server drips, the request ends at the deadline as a timeout."""
    server = drip(shape)
    result, took = timed(lambda: model.ask(server.url, "smollm2", MESSAGES, DEADLINE_S))
    assert isinstance(result, model.ModelFailure) and result.kind == "timeout", result
    assert DEADLINE_S - 0.05 <= took <= DEADLINE_S + SLACK_S, took


@pytest.mark.parametrize("shape", ["status-line", "body-chunked"])
def test_the_asker_holds_one_deadline_for_props_and_the_completion(drip, shape: str) -> None:
    """`auto` asks /props before the completion: both together end within one timeout."""
    server = drip(shape)
    settings = settings_module.load({"AIRLOCK_MODEL_TIMEOUT_S": str(DEADLINE_S), "AIRLOCK_MODEL_URL": server.url})
    ask = Asker(settings, task_module.load(ROOT / "tasks" / "order_status.toml"), server.url)
    result, took = timed(lambda: ask(MESSAGES))
    assert isinstance(result, model.ModelFailure) and result.kind == "timeout", result
    assert took <= DEADLINE_S + SLACK_S, took


@pytest.mark.parametrize("shape", SHAPES)
def test_the_reader_falls_back_to_the_recording_at_the_deadline(drip, shape: str) -> None:
    """The reader's answer to the seed email comes from its recording, within the deadline,
    and its notes say the model timed out."""
    server = drip(shape)
    settings = settings_module.load({"AIRLOCK_MODEL_TIMEOUT_S": str(DEADLINE_S), "AIRLOCK_MODEL_URL": server.url})
    reader = build(settings, task_module.load(ROOT / "tasks" / "order_status.toml"))
    email = Read(message_id="m-1", raw=SEED.read_bytes(), format="eml")
    reading, took = timed(lambda: reader.read(email))
    assert took <= DEADLINE_S + SLACK_S, took
    assert isinstance(reading, Reading) and (reading.source, reading.answer) == ("recorded", "4411"), reading
    assert str(reading.notes["model_error"]).startswith("timeout"), reading.notes


@pytest.mark.parametrize("shape", ["status-line", "body-content-length"])
def test_airlock_ups_probes_of_the_model_end_at_their_timeout(drip, shape: str) -> None:
    """`airlock up` asks the model whether it answers and how many it serves: a dripping
    server is silent for the one and says nothing for the other, each within its timeout."""
    server = drip(shape)
    silence, took = timed(lambda: preflight.model_silence(server.url, DEADLINE_S))
    assert took <= DEADLINE_S + SLACK_S, took
    assert silence == (f"no answer within {DEADLINE_S:g} s" if shape == "status-line" else None), silence
    slots, took = timed(lambda: preflight.model_slots(server.url, DEADLINE_S))
    assert slots is None and took <= DEADLINE_S + SLACK_S, (slots, took)


def test_a_stack_with_a_dripping_model_completes_each_email_from_its_recording(stack, drip) -> None:
    """Under `airlock up`, a model that drips its body holds no email: each one, the second
    included, completes from the recording, and the trace says the model timed out."""
    server = drip("body-chunked")
    s = stack(AIRLOCK_MODEL_TIMEOUT_S=str(DEADLINE_S), AIRLOCK_READ_DEADLINE_S="20").start("--model-url", server.url)
    for _ in range(2):
        started = time.monotonic()
        (result,) = s.inject(str(SEED))
        took = time.monotonic() - started
        assert result["outcome"] == "completed" and took < STACK_EMAIL_S, (result, took)
        (answer,) = s.trace(result["id"], "model_answer")
        assert answer["source"] == "recorded" and answer["model_error"].startswith("timeout"), answer
    assert server.requests >= 2
    assert s.trace(event="service_restarted") == []  # the same reader served both
