"""Against a real broker: memory bounded in bytes under a flood of large emails,
and a full queue that `airlock inject` reports with its own exit code."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from airlock import settings as settings_module
from airlock.client import IntakeClient
from airlock.errors import QueueFull
from airlock.wire import Email
from tests.integration.conftest import Stack, wait_until

QUEUE_MAX_BYTES = 16 * 1024 * 1024
EMAIL = b"Subject: order\r\n\r\n" + b"Order 4411, where is it? " * (255 * 1024 // 25)


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_3000_emails_of_255_kb_keep_the_broker_within_its_byte_bound(stack, fake_model) -> None:
    """3,000 emails of 255 KB at a stack whose one reader is stuck on a slow model: the broker
    takes what fits in AIRLOCK_QUEUE_MAX_BYTES, refuses the rest with queue_full, and its
    resident memory grows by about the bound, not by 780 MB (the queue once held 100,000)."""
    model = fake_model("4411")
    model.delay_s = 60  # the reader holds one email; the queue fills behind it
    s = stack(AIRLOCK_QUEUE_MAX_BYTES=str(QUEUE_MAX_BYTES), AIRLOCK_MODEL_TIMEOUT_S="60").start(
        "--model-url", model.url, "--readers", "1")
    pid = s.pid("broker")
    before = _rss_kib(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kib(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    accepted: list[str] = []
    settings = settings_module.load(s.env)
    started = time.monotonic()
    try:
        with IntakeClient(settings, timeout_s=20, busy_wait_s=2.0) as client:
            with pytest.raises(QueueFull) as refused:
                for _, message_id in client.submit([Email(EMAIL, "eml", f"flood-{n}") for n in range(3000)]):
                    accepted.append(message_id)
    finally:
        done.set()
        sampler.join(5)
    grown_mib = (max(peak[0], _rss_kib(pid, "VmHWM")) - before) / 1024
    print(f"broker RSS {before / 1024:.0f} MiB at start, +{grown_mib:.0f} MiB at peak; "
          f"{len(accepted)} accepted in {time.monotonic() - started:.1f} s")
    assert "queue full" in str(refused.value) and "AIRLOCK_QUEUE_MAX_BYTES" in str(refused.value)
    assert 0 < len(accepted) * len(EMAIL) <= QUEUE_MAX_BYTES + 2 * len(EMAIL)
    # The bound, one turn's reading (8 MiB, a few copies) and 16 frames per connection.
    assert grown_mib < QUEUE_MAX_BYTES / 2**20 + 48, grown_mib
    status = s.airlock("status", "--json")
    assert status.returncode == 0 and s.process.poll() is None


def test_inject_into_a_full_queue_says_so_and_exits_75(stack, fake_model, tmp_path) -> None:
    """`airlock inject` into a queue that stays full (for AIRLOCK_QUEUE_FULL_WAIT_S) prints what
    was accepted, then one line naming the limit, and exits 75 (EX_TEMPFAIL: try again later)."""
    model = fake_model("4411")
    model.delay_s = 60
    s = stack(AIRLOCK_QUEUE_MAX_BYTES=str(600 * 1024), AIRLOCK_MODEL_TIMEOUT_S="60",
              AIRLOCK_QUEUE_FULL_WAIT_S="2").start(
        "--model-url", model.url, "--readers", "1")
    path = tmp_path / "big.eml"
    path.write_bytes(EMAIL)
    done = s.airlock("inject", "--json", *[str(path)] * 8, timeout=180)
    assert done.returncode == 75, (done.returncode, done.stderr)
    assert len(done.stdout.splitlines()) >= 2  # one with the reader, two waiting (600 KiB)
    assert done.stderr.count("\n") == 1 and "queue full" in done.stderr and "Traceback" not in done.stderr


def test_journal_is_compacted_once_emails_are_final_and_a_killed_broker_redoes_nothing(stack, fake_model) -> None:
    """With AIRLOCK_JOURNAL_COMPACT_BYTES at 200 KB, 40 emails of 10 KB that all finish leave
    a journal far smaller than they were; after kill -9 the new broker recovers none of them."""
    import os
    import signal

    model = fake_model("4411")
    s = stack(AIRLOCK_JOURNAL_COMPACT_BYTES=str(200 * 1024)).start("--model-url", model.url)
    email = b"Subject: order 4411\r\n\r\nWhere is order 4411? " + b"Please. " * 1250
    with IntakeClient(settings_module.load(s.env), timeout_s=20) as client:
        ids = [i for _, i in client.submit([Email(email, "eml", f"e{n}") for n in range(40)])]
        assert len(list(client.outcomes(ids, timeout_s=120))) == 40
    journal = s.data / "journal.bin"
    assert wait_until(lambda: s.trace(event="journal_compacted"), timeout_s=20)
    assert journal.stat().st_size < 200 * 1024 < 40 * len(email)
    old = s.pid("broker")
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: (s.data / "run" / "broker.pid").exists() and s.pid("broker") != old, timeout_s=30)
    assert wait_until(lambda: len(s.trace(event="started")) >= 2, timeout_s=30)
    assert not [r for r in s.trace(event="recovered") if r["message_id"] in ids]
    finals = [o["message_id"] for o in s.trace(event="outcome") if o["message_id"] in ids]
    assert sorted(finals) == sorted(ids)


def test_8_awaits_of_250000_ids_are_refused_at_once(stack, fake_model) -> None:
    """8 frames of Await naming one in-flight email 250,000 times each: 8 typed refusals
    within a second or two, no waiter made, a handful of trace lines (it once made 2 million
    waiters and 2 million lines and stalled the broker 7 s)."""
    from airlock import wire

    model = fake_model("4411")
    model.delay_s = 30
    s = stack().start("--model-url", model.url, "--readers", "1")
    with IntakeClient(settings_module.load(s.env), timeout_s=20) as client:
        [(_, message_id)] = list(client.submit([Email(EMAIL[:2000], "eml", "one")]))
    lines_before = len(s.trace())
    sock = s.socket("intake")
    try:
        started = time.monotonic()
        for ref in range(8):
            sock.send(wire.encode(wire.Await(ref=ref, ids=[message_id] * 250_000)))
        decode = wire.outbound_decoder("intake")
        answers: list[wire.Message | wire.Malformed | wire.Violation] = []
        while len(answers) < 8 and sock.poll(10_000):
            answers += decode.frame(sock.recv())
        elapsed = time.monotonic() - started
    finally:
        sock.close(linger=0)
    assert [a.code if isinstance(a, wire.Refused) else a for a in answers] == ["too_many_ids"] * 8, answers
    assert elapsed < 3.0, elapsed
    with IntakeClient(settings_module.load(s.env), timeout_s=5) as client:
        assert client.status().in_flight == 1
    assert len(s.trace()) - lines_before < 20


def test_an_email_that_gets_its_reader_killed_fails_after_3_deliveries(stack, fake_model) -> None:
    """The reader is SIGKILLed (as the kernel's OOM killer does) each time it reads one email:
    that email ends failed after AIRLOCK_MAX_ATTEMPTS (3) deliveries, each kill counted, and
    the five ordinary emails sent after it all complete."""
    import os
    import signal

    s: Stack | None = None

    def reply(messages: list[dict[str, str]]) -> str:
        if "POISON" in str(messages):
            assert s is not None  # started before any email is sent
            os.kill(s.pid("reader-1"), signal.SIGKILL)  # dies mid-email, as under a memory limit
        return "4411"

    model = fake_model(reply)
    s = stack(AIRLOCK_RESTART_BACKOFF_MAX_S="1").start("--model-url", model.url, "--readers", "1")
    poison = b"Subject: order\r\n\r\nPOISON: where is order 4411?"
    ordinary = b"Subject: order\r\n\r\nWhere is order 4411?"
    with IntakeClient(settings_module.load(s.env), timeout_s=20) as client:
        items = [Email(poison, "eml", "poison")] + [Email(ordinary, "eml", f"o{n}") for n in range(5)]
        ids = [i for _, i in client.submit(items)]
        results = {r.message_id: r for r in client.outcomes(ids, timeout_s=120)}
    assert results[ids[0]].outcome == "failed" and "after 3 deliveries" in results[ids[0]].reason
    assert [results[i].outcome for i in ids[1:]] == ["completed"] * 5
    assert len(list(s.trace(ids[0], "redelivery"))) == 2


def test_one_email_into_a_full_queue_is_refused_within_the_client_timeout(stack, fake_model) -> None:
    """submit_one (the SMTP intake, the page) gives up on a full queue within its timeout with
    QueueFull, a BrokerUnreachable, so the SMTP intake answers 451 and the sender retries."""
    from airlock.errors import BrokerUnreachable

    model = fake_model("4411")
    model.delay_s = 60
    s = stack(AIRLOCK_QUEUE_MAX_BYTES=str(300 * 1024), AIRLOCK_MODEL_TIMEOUT_S="60").start(
        "--model-url", model.url, "--readers", "1")
    with IntakeClient(settings_module.load(s.env), timeout_s=2) as client:
        # The reader holds it, unread: its 255 KB count until the reader answers.
        client.submit_one(Email(EMAIL, "eml", "fill"))
        started = time.monotonic()
        with pytest.raises(BrokerUnreachable) as refused:
            client.submit_one(Email(EMAIL, "eml", "one too many"))
    assert isinstance(refused.value, QueueFull) and time.monotonic() - started < 6


def test_inject_wait_keeps_within_the_waiter_bound_and_still_hears_every_outcome(stack, fake_model) -> None:
    """With AIRLOCK_AWAIT_MAX_WAITERS=3 and AIRLOCK_AWAIT_MAX_IDS=2, `airlock inject --wait` of
    8 emails awaits them a few at a time and reports all 8 outcomes."""
    model = fake_model("4411")
    s = stack(AIRLOCK_AWAIT_MAX_WAITERS="3", AIRLOCK_AWAIT_MAX_IDS="2").start("--model-url", model.url)
    seed = str(Path(__file__).resolve().parents[2] / "samples" / "seed_4411_de.eml")
    results = s.inject(*[seed] * 8)
    assert [r["outcome"] for r in results] == ["completed"] * 8
