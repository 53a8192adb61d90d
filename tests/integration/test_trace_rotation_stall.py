"""A trace rotation never stalls the broker: the fold into the checkpoint runs off its loop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airlock import records, settings as settings_module, trace, tracefiles
from airlock.wire import Ping, Status, encode, outbound_decoder
from tests.conftest import airlock_env
from tests.integration.test_disk_full import Intake

ANSWER_WITHIN_S = 2.0  # a Status while the fold is held: a loop that waited for it never answers


def test_the_broker_answers_while_a_rotated_segment_is_being_folded(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold of a closed segment is held until the test lets it go: meanwhile the broker
    still accepts email and answers a status request, and once it is let go the checkpoint
    is written and said in the trace."""
    from broker.app import serve

    armed, entered, release = threading.Event(), threading.Event(), threading.Event()
    folding = tracefiles.write_checkpoint

    def held_fold(*args, **kwargs):  # a segment of GBs, or a slow disk
        if armed.is_set():
            entered.set()
            release.wait(30)
        return folding(*args, **kwargs)

    monkeypatch.setattr(tracefiles, "write_checkpoint", held_fold)
    settings = settings_module.load({**airlock_env(tmp_path / "data"), "AIRLOCK_INSECURE": "1",
                                     "AIRLOCK_TRACE_SEGMENT_BYTES": "4096"})
    stop = threading.Event()
    broker = threading.Thread(target=serve, args=(settings, None, stop), daemon=True)
    broker.start()
    intake = Intake(str(settings.ports["intake"]))
    try:
        assert len(intake.submit(1)) == 1  # up
        armed.set()
        for _ in range(100):
            assert len(intake.submit(2)) == 2
            if entered.wait(0.05):
                break
        assert entered.is_set(), "no rotation"
        intake.sock.send(encode(Ping(ref=7)))
        answered = intake.sock.poll(int(ANSWER_WITHIN_S * 1000))
        release.set()
        assert answered, f"no Status within {ANSWER_WITHIN_S} s while a segment was folded"
        (status,) = outbound_decoder("intake").frame(intake.sock.recv())
        assert isinstance(status, Status)
        assert len(intake.submit(2)) == 2  # and it goes on
    finally:
        release.set()
        intake.close()
        stop.set()
        broker.join(20)
    assert not broker.is_alive()
    lines = list(trace.read(settings.trace_path))
    assert any(isinstance(line, records.TraceCheckpoint) for line in lines)
    assert tracefiles.load(settings.trace_path).through >= 1


def test_the_rotation_bench_reports_its_figures(tmp_path: Path) -> None:
    """bench.rotation_stall on a 1 MiB segment: a real broker rotates, folds, and the figures are there."""
    from bench import rotation_stall

    figures = rotation_stall.run(tmp_path / "data", 1024 * 1024, None)
    assert figures["status_answers"] and figures["emails_in_segment"]
    assert isinstance(figures["stall_s_max_during_rotation"], float)
    assert tracefiles.load_through(tmp_path / "data" / "trace.jsonl") >= 1
