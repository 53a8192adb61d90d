"""A trace rotation costs the broker's loop a rename and an open; the fold runs on broker.folding's thread."""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from pathlib import Path

import pytest

from airlock import records, trace, tracefiles
from airlock.settings import Settings
from broker import housekeeping
from broker.folding import Folder

LINE = b'{"event":"note","stage":"broker","message_id":null,"at":"x"}\n'


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every fsync made, as (thread name, what was synced)."""
    made: list[tuple[str, str]] = []
    real = os.fsync

    def recorded(descriptor: int) -> None:
        made.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{descriptor}")))
        real(descriptor)

    monkeypatch.setattr(os, "fsync", recorded)
    return made


def test_a_rotation_makes_no_fsync_on_the_writers_thread(tmp_path: Path, fsyncs: list[tuple[str, str]]) -> None:
    """The live file is closed into a segment and a new one opened with no wait for the disk."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, segment_bytes=len(LINE) * 10)
    fsyncs.clear()
    writer.write(LINE * 12)
    assert writer.flush() is None
    assert writer.rotated and [number for number, _ in tracefiles.closed(path)] == [1]
    assert fsyncs == []
    writer.write(LINE * 12)
    writer.flush()
    assert [number for number, _ in tracefiles.closed(path)] == [1, 2] and fsyncs == []
    writer.close()


def test_a_rotation_reads_no_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next segment's number is counted by the writer, not read off the checkpoint each time."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, segment_bytes=len(LINE) * 10)
    monkeypatch.setattr(tracefiles, "load", lambda _: pytest.fail("the checkpoint was read"))
    monkeypatch.setattr(tracefiles, "load_through", lambda _: pytest.fail("the checkpoint was read"))
    monkeypatch.setattr(tracefiles, "closed", lambda _: pytest.fail("the folder was listed"))
    for _ in range(3):
        writer.write(LINE * 12)
        writer.flush()
    writer.close()
    assert sorted(p.name for p in tmp_path.glob("trace.0*.jsonl")) == [
        "trace.000001.jsonl", "trace.000002.jsonl", "trace.000003.jsonl"]


def test_the_writers_sync_makes_the_segments_it_closed_durable(tmp_path: Path, fsyncs: list[tuple[str, str]]) -> None:
    """Before the journal forgets an email (compaction), the segments a rotation closed are on disk too."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, segment_bytes=len(LINE) * 10)
    writer.write(LINE * 12)
    writer.flush()
    assert writer.sync() is None
    synced = {target for _, target in fsyncs}
    assert str(tmp_path / "trace.000001.jsonl") in synced and str(tmp_path) in synced
    fsyncs.clear()
    assert writer.sync() is None
    assert str(tmp_path / "trace.000001.jsonl") not in {target for _, target in fsyncs}  # once
    writer.close()


def test_a_fold_makes_the_segment_durable_before_its_checkpoint(settings: Settings,
                                                               fsyncs: list[tuple[str, str]]) -> None:
    """housekeeping.fold: the segment's fsync and the folder's come before the checkpoint's."""
    writer = trace.TraceWriter(settings.trace_path, segment_bytes=len(LINE) * 10)
    writer.write(LINE * 12)
    writer.flush()
    writer.close()
    (line,) = housekeeping.fold(settings, ())
    assert b"trace_checkpoint" in line
    targets = [target for _, target in fsyncs]
    segment = str(settings.trace_path.with_name("trace.000001.jsonl"))
    checkpoint = next(i for i, target in enumerate(targets) if ".checkpoint" in target)
    assert targets.index(segment) < targets.index(str(settings.data_dir)) < checkpoint


def test_the_folder_folds_on_its_own_thread_and_hands_back_its_line(settings: Settings) -> None:
    """ask() returns at once while the fold is held; take() gives its line once it is done."""
    entered, release = threading.Event(), threading.Event()
    seen: list[tuple[str, frozenset[str]]] = []

    def fold(given: Settings, journalled: Collection[str]) -> list[bytes]:
        seen.append((threading.current_thread().name, frozenset(journalled)))
        entered.set()
        release.wait(10)
        return [b"folded\n"]

    folder = Folder(settings, fold)
    journal_ids = {"a-1": 10}
    folder.ask(journal_ids.keys())
    journal_ids["a-2"] = 10  # the loop goes on changing the journal: the fold has its own copy
    assert entered.wait(10) and folder.busy and folder.take() == []
    release.set()
    assert folder.stop() == [b"folded\n"]
    assert seen == [("trace-fold", frozenset({"a-1"}))]


def test_asks_during_a_fold_are_taken_together_after_it(settings: Settings) -> None:
    """Three asks while one fold runs make one more fold, with the latest ids."""
    entered, release = threading.Event(), threading.Event()
    seen: list[frozenset[str]] = []

    def fold(given: Settings, journalled: Collection[str]) -> list[bytes]:
        seen.append(frozenset(journalled))
        entered.set()
        release.wait(10)
        return [f"{len(seen)}\n".encode()]

    folder = Folder(settings, fold)
    folder.ask(["a"])
    assert entered.wait(10)
    for ids in (["b"], ["c"], ["d"]):
        folder.ask(ids)
    release.set()
    while folder.busy:
        threading.Event().wait(0.01)
    assert folder.stop() == [b"1\n", b"2\n"] and seen == [frozenset("a"), frozenset("d")]


def test_a_fold_that_raises_is_a_failed_line_and_folding_goes_on(settings: Settings) -> None:
    """An unexpected error is said in the trace as trace_checkpoint_failed; the next ask folds."""
    calls: list[int] = []

    def fold(given: Settings, journalled: Collection[str]) -> list[bytes]:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("boom")
        return [b"folded\n"]

    folder = Folder(settings, fold)
    folder.ask([])
    while folder.busy:
        threading.Event().wait(0.01)
    folder.ask([])
    while folder.busy:
        threading.Event().wait(0.01)
    failed, folded = folder.stop()
    assert isinstance(records.decode(failed), records.TraceCheckpointFailed) and b"ValueError: boom" in failed
    assert folded == b"folded\n"
