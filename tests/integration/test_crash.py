"""Nothing lost, nothing twice: services killed with SIGKILL again and again mid-stream,
and thousands of malformed frames on every endpoint."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import msgspec

from tests.conftest import ROOT
from tests.integration.conftest import wait_until

SEED = str(ROOT / "samples" / "seed_4411_de.eml")
CRASH_ENV = {"AIRLOCK_RESTART_BACKOFF_MAX_S": "1", "AIRLOCK_READ_DEADLINE_S": "5",
             "AIRLOCK_VALIDATE_DEADLINE_S": "5", "AIRLOCK_ACT_DEADLINE_S": "5"}


def kill(stack, service: str) -> None:
    """SIGKILL the service's current process and wait for `airlock up` to start a new one."""
    old = stack.pid(service)
    try:
        os.kill(old, signal.SIGKILL)
    except ProcessLookupError:
        pass
    assert wait_until(lambda: (stack.data / "run" / f"{service}.pid").exists() and stack.pid(service) != old,
                      timeout_s=20), f"{service} was not restarted"


def test_kill_every_service_ten_times_with_200_emails_in_flight(stack, fake_model) -> None:
    """After 40 SIGKILLs across broker, reader, validator and actor, every email has exactly
    one final outcome and no (message id, step) was called twice."""
    model = fake_model("4411")
    model.delay_s = 0.15  # 200 emails keep two readers busy for ~15 s: the kills land mid-stream
    s = stack(**CRASH_ENV).start("--model-url", model.url, "--readers", "2")
    submitted = s.airlock("inject", "--json", *[SEED] * 200)
    assert submitted.returncode == 0, submitted.stderr
    ids = [msgspec.json.decode(line)["id"] for line in submitted.stdout.splitlines()]
    assert len(set(ids)) == 200
    started = time.monotonic()
    for _ in range(10):
        for service in ("broker", "reader-1", "validator", "actor"):
            kill(s, service)
            time.sleep(0.2)
    assert time.monotonic() - started < 240

    def finals() -> Counter[str]:
        return Counter(o["message_id"] for o in s.trace(event="outcome") if o["outcome"] != "escalated")

    assert wait_until(lambda: set(finals()) >= set(ids), timeout_s=180), \
        f"{len(set(ids) - set(finals()))} emails without an outcome"
    counts = finals()
    assert all(counts[i] == 1 for i in ids), {i: counts[i] for i in ids if counts[i] != 1}
    steps = Counter((c["message_id"], c["step"]) for c in s.calls())
    assert not [key for key, n in steps.items() if n > 1]
    completed = [o["message_id"] for o in s.trace(event="outcome") if o["outcome"] == "completed"]
    assert all(steps[(i, 1)] == steps[(i, 2)] == 1 for i in completed)
    assert len(s.trace(event="service_restarted")) >= 40


def test_5000_malformed_frames_per_endpoint_are_refused_and_counted(stack) -> None:
    """20,000 garbage frames: every process lives, each frame is one malformed_frame line and counted."""
    s = stack().start()
    pids = {name: s.pid(name) for name in ("broker", "reader-1", "validator", "actor")}
    frames = [os.urandom(n % 97 + 1) for n in range(5000)]
    for role in ("intake", "reader", "validator", "actor"):
        sock = s.socket(role)  # a peer with a valid key gone rogue: its frames reach the decoder
        for frame in frames:
            sock.send(b"\xc1" + frame)  # 0xc1 is never valid msgpack
        sock.close(linger=60_000)  # under load the CURVE handshake and 5,000 sends take a while
    expected = dict.fromkeys(("intake", "reader", "validator", "actor"), 5000)
    assert wait_until(lambda: Counter(t["endpoint"] for t in s.trace(event="malformed_frame")) == expected,
                      timeout_s=60), Counter(t["endpoint"] for t in s.trace(event="malformed_frame"))
    counters = s.status()["counters"]
    for role in expected:
        assert counters.get(f"malformed.{role}") == 5000, counters
    for pid in pids.values():
        os.kill(pid, 0)  # raises if any process died
    (result,) = s.inject(SEED)
    assert result["outcome"] == "completed"
