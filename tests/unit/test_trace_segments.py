"""The trace closed into segments by size: every reader reads them in order, and a restart
reads the checkpoint and the live segment only, so it does not grow with history."""

from __future__ import annotations

import itertools
import json
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO

import msgspec
import pytest

from airlock import files as files_module, settings as settings_module, trace, tracefiles
from airlock.errors import SettingsError
from airlock.wire import Hello, Outcome, Read
from broker import housekeeping, recovery
from broker.journal import Journal, QueuedEmail
from broker.router import Router, Send
from dashboard.feed import FileTail
from ops import supervisor
from tests import lines as trace_lines

SEGMENT = 4096  # bytes: a few emails a segment, so a short history spans many segments
FILLER = "x" * 300  # a reader's line, about a tenth of an email's trace


def _email(message_id: str, outcome: Outcome | None) -> list[bytes]:
    lines = [trace_lines.received(message_id), trace_lines.model_answer(message_id, FILLER)]
    return lines + ([trace_lines.outcome(message_id, outcome)] if outcome else [])


def _history(settings, journal: Journal, emails: list[tuple[str, Outcome | None]]) -> trace.TraceWriter:
    """Write `emails` as the broker does: a turn each, then flush, then a checkpoint when due."""
    writer = trace.TraceWriter(settings.trace_path, SEGMENT)
    for message_id, outcome in emails:
        for line in _email(message_id, outcome):
            writer.write(line)
        writer.flush()
        if writer.rotated:
            housekeeping.checkpoint(settings, writer, journal)
    return writer


def _opened(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = tracefiles._open_or_none

    def noted(path: Path) -> BinaryIO | None:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(tracefiles, "_open_or_none", noted)
    return seen


def test_writer_closes_the_live_file_into_segments_and_read_sees_all_in_order(tmp_path: Path) -> None:
    """Past segment_bytes the live file is renamed at a flush; trace.jsonl stays the live file
    and read() gives every line once, in the order written."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, SEGMENT)
    ids = [f"m-{n}" for n in range(40)]
    for message_id in ids:
        for line in _email(message_id, "completed"):
            writer.write(line)
        writer.flush()
    writer.close()
    segments = tracefiles.closed(path)
    assert len(segments) >= 5 and path.exists()
    assert [number for number, _ in segments] == list(range(1, len(segments) + 1))
    assert all(segment.stat().st_size >= SEGMENT for _, segment in segments)
    events = [(trace.about(r), trace.event_of(r)) for r in trace.read(path)]
    assert events == [(i, e) for i in ids for e in ("received", "model_answer", "outcome")]
    assert [trace.event_of(r) for r in trace.read(path, "m-3")] == ["received", "model_answer", "outcome"]


def test_a_turn_is_never_split_across_segments(tmp_path: Path) -> None:
    """Rotation waits for the flush at the end of a turn, however far past the size it goes."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, SEGMENT)
    turn = [line for n in range(30) for line in _email(f"m-{n}", "completed")]  # ~10 segments' worth
    for line in turn:
        writer.write(line)
    assert not tracefiles.closed(path)
    writer.flush()
    writer.close()
    assert len(tracefiles.closed(path)) == 1 and path.stat().st_size == 0


def test_recovery_reads_only_the_checkpoint_and_the_live_segment(settings, monkeypatch) -> None:
    """After a long history, a restart opens no closed segment, yet dispatches every journalled
    unfinished email, keeps escalations, abandons what was never accepted, and does not
    dispatch a journalled email whose final outcome is in a closed segment."""
    journal = Journal(settings.data_dir / "journal.bin")
    waiting, escalated, final_journalled, never_accepted = "w-1", "e-1", "f-1", "o-1"
    for message_id in (waiting, escalated, final_journalled):
        journal.append(QueuedEmail(message_id, b"Order " + message_id.encode(), "text"))
    journal.sync()
    history: list[tuple[str, Outcome | None]] = [
        (waiting, None), (escalated, "escalated"), (never_accepted, None), (final_journalled, "completed")]
    history += [(f"old-{n}", "completed") for n in range(200)]  # final, no longer journalled
    _history(settings, journal, history).close()
    assert len(tracefiles.closed(settings.trace_path)) >= 20
    seen = _opened(monkeypatch)
    router = Router(settings, boot=0xABC)
    effects, backlog = recovery.recover(router, settings, journal, 0.0)
    assert seen == [settings.trace_path]  # the checkpoint is read whole; no segment is opened
    effects += router.handle("reader", b"r", Hello(credit=100), 0.0)
    dispatched = [e.message.message_id for e in effects if isinstance(e, Send) and isinstance(e.message, Read)]
    abandoned = [json.loads(e)["message_id"] for e in effects if isinstance(e, bytes) and b'"outcome"' in e]
    assert dispatched == [waiting] and abandoned == [never_accepted] and not backlog
    assert router.flights[escalated].stage == "escalated"
    journal.close()


def test_the_checkpoint_holds_what_is_live_not_history(settings) -> None:
    """Final emails the journal no longer holds are dropped: the states recovery keeps in
    memory stay bounded however long the history."""
    journal = Journal(settings.data_dir / "journal.bin")
    _history(settings, journal, [(f"old-{n}", "completed") for n in range(500)] + [("w-1", None)]).close()
    state = trace.states(settings.trace_path)
    assert state["w-1"] == "open"
    assert len(state) < 20  # the live segment's few, not 501
    journal.close()


def test_a_crash_between_rotation_and_checkpoint_loses_no_state(settings) -> None:
    """Segments the checkpoint does not cover yet are read at restart, then folded in."""
    journal = Journal(settings.data_dir / "journal.bin")
    writer = trace.TraceWriter(settings.trace_path, SEGMENT)  # no checkpoint is ever taken
    history: list[tuple[str, Outcome | None]] = [("a", "completed"), ("b", None), ("c", "escalated")]
    for message_id, outcome in history + [(f"old-{n}", "completed") for n in range(40)]:
        for line in _email(message_id, outcome):
            writer.write(line)
        writer.flush()
    assert writer.rotated and not tracefiles.checkpoint_path(settings.trace_path).exists()
    state, read = tracefiles.states(settings.trace_path)
    assert (state["a"], state["b"], state["c"]) == ("final", "open", "escalated")
    assert len(read) == len(tracefiles.closed(settings.trace_path)) + 1
    housekeeping.checkpoint(settings, writer, journal)
    state, read = tracefiles.states(settings.trace_path)
    assert read == [settings.trace_path] and (state["b"], state["c"]) == ("open", "escalated") and "a" not in state
    writer.close()
    journal.close()


def test_old_single_file_trace_is_closed_into_a_segment_at_start(settings) -> None:
    """A trace from before segments, already past the size: the first broker renames it
    before its first line and its checkpoint folds it once; later restarts skip it."""
    settings.data_dir.mkdir(parents=True)
    settings.trace_path.write_bytes(b"".join(line for n in range(50) for line in _email(f"m-{n}", "completed"))
                                    + b"".join(_email("w-1", None)))
    journal = Journal(settings.data_dir / "journal.bin")
    writer = trace.TraceWriter(settings.trace_path, SEGMENT)
    assert writer.rotated and settings.trace_path.stat().st_size == 0
    housekeeping.checkpoint(settings, writer, journal)
    assert trace.states(settings.trace_path) == {"w-1": "open"}
    assert len(list(trace.read(settings.trace_path))) == 51 * 2 + 50
    writer.close()
    journal.close()


def test_retention_deletes_only_covered_segments_beyond_the_limit(settings) -> None:
    """AIRLOCK_TRACE_KEEP_SEGMENTS keeps that many closed segments, the newest; recovery
    still finds an email received in a deleted one."""
    settings = msgspec.structs.replace(settings, trace_keep_segments=2)
    journal = Journal(settings.data_dir / "journal.bin")
    _history(settings, journal, [("w-1", None)] + [(f"old-{n}", "completed") for n in range(100)]).close()
    numbers = [number for number, _ in tracefiles.closed(settings.trace_path)]
    assert len(numbers) == 2 and numbers[-1] == tracefiles.load(settings.trace_path).through
    assert trace.states(settings.trace_path)["w-1"] == "open"
    journal.close()


def test_follow_reads_on_across_a_rotation(tmp_path: Path) -> None:
    """`airlock trace --follow` gives the lines written just before the live file was closed,
    then the new live file's, none twice."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, SEGMENT)
    writer.write(trace_lines.started())
    writer.flush()
    followed = trace.follow(path, poll_s=0.001)
    assert isinstance(followed, Generator)  # closed below, as a generator can be
    assert trace.event_of(next(followed)) == "started"
    ids = [f"m-{n}" for n in range(30)]
    for message_id in ids:  # several rotations while the follower waits
        for line in _email(message_id, "completed"):
            writer.write(line)
        writer.flush()
    assert len(tracefiles.closed(path)) >= 3
    got = [(trace.about(r), trace.event_of(r)) for r in itertools.islice(followed, len(ids) * 3)]
    assert got == [(i, e) for i in ids for e in ("received", "model_answer", "outcome")]
    followed.close()
    writer.close()


def test_dashboard_tail_reads_the_end_of_a_closed_segment(tmp_path: Path) -> None:
    """Lines written just before a rotation reach the page even when the new live file has
    grown past the old offset before the next poll (done here by hand, as the writer does)."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b'{"n":0}\n')
    tail = FileTail(path)
    assert tail.new_lines() == [b'{"n":0}']
    before = [b'{"n":%d}' % n for n in range(1, 11)]
    with open(path, "ab") as handle:
        handle.write(b"\n".join(before) + b"\n")
    path.rename(tracefiles.segment_path(path, 1))
    after = [b'{"n":%d}' % n for n in range(11, 400)]
    path.write_bytes(b"\n".join(after) + b"\n")
    assert tail.new_lines() == before + after


def test_supervisor_sees_started_after_the_live_file_was_closed(tmp_path: Path) -> None:
    """The broker may close the live file before (or just after) its `started` line: the
    supervisor's wait for that line still finds it."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join(_email("m-0", "completed")) * 20)
    since = tracefiles.mark(path)
    writer = trace.TraceWriter(path, SEGMENT)  # past the size: renamed before any line
    writer.write(trace_lines.started())
    writer.flush()
    assert supervisor._broker_started_since(path, since)
    writer.close()


def test_segment_settings_name_their_key() -> None:
    """The segment size and retention come from AIRLOCK_* settings, checked at start."""
    loaded = settings_module.load({"AIRLOCK_TRACE_SEGMENT_BYTES": "1000", "AIRLOCK_TRACE_KEEP_SEGMENTS": "3"})
    assert (loaded.trace_segment_bytes, loaded.trace_keep_segments) == (1000, 3)
    assert settings_module.load({}).trace_segment_bytes == 64 * 1024 * 1024
    with pytest.raises(SettingsError, match="AIRLOCK_TRACE_KEEP_SEGMENTS"):
        settings_module.load({"AIRLOCK_TRACE_KEEP_SEGMENTS": "-1"})


def test_a_rotation_that_cannot_open_a_new_file_keeps_the_live_file(tmp_path: Path, monkeypatch) -> None:
    """A full disk at rotation: no exception, no line lost, trace.jsonl still the live file,
    and the next flush closes it once a file can be made again."""
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(path, SEGMENT)
    real = trace.open_lines

    def full(where: Path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trace, "open_lines", full)
    for line in _email("m-1", "completed") * 12:
        writer.write(line)
    writer.flush()
    assert not tracefiles.closed(path) and not writer.rotated
    monkeypatch.setattr(trace, "open_lines", real)
    writer.write(trace_lines.received("m-2"))
    writer.flush()
    writer.close()
    assert writer.rotated and len(tracefiles.closed(path)) == 1
    assert [trace.about(r) for r in trace.read(path)][-1] == "m-2" and len(list(trace.read(path))) == 37


def test_settled_waits_across_a_rotation_and_counts_each_line_once(tmp_path: Path, monkeypatch) -> None:
    """A bench or attack waiting for outcomes: the live file is closed into a segment
    between two polls (by hand here, as the writer does); every line is still found, once."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join(trace_lines.received(i) for i in ("a", "b")))
    polls = []

    def broker_turn(_seconds: float) -> None:  # what the broker does while settled sleeps
        polls.append(1)
        with open(path, "ab") as handle:
            handle.write(trace_lines.outcome("a"))
        path.rename(tracefiles.segment_path(path, len(polls)))
        path.write_bytes(trace_lines.outcome("b"))

    monkeypatch.setattr(trace.time, "sleep", broker_turn)
    found = trace.settled(path, ["a", "b"], 2, timeout_s=60)
    assert polls == [1]
    assert {i: [trace.event_of(r) for r in kept] for i, kept in found.items()} == {
        "a": ["received", "outcome"], "b": ["received", "outcome"]}


def test_a_peer_cannot_write_the_checkpoint_events() -> None:
    """trace_checkpoint lines are the broker's word: a client's Notice may not take the name."""
    from broker import events

    for name in ("trace_checkpoint", "trace_checkpoint_failed"):
        assert events.refusal(name, "intake", namespaced=False)


def test_dashboard_opened_just_after_a_rotation_still_shows_recent_lines(tmp_path: Path) -> None:
    """A page opened when the live file is nearly empty reads the end of the newest segment too."""
    path = tmp_path / "trace.jsonl"
    tracefiles.segment_path(path, 1).write_bytes(b"".join(b'{"n":%d}\n' % n for n in range(100)))
    path.write_bytes(b'{"n":100}\n{"n":101}\n{"n":')
    tail = FileTail(path, initial_bytes=50)
    assert tail.new_lines() == [b'{"n":%d}' % n for n in range(98, 102)]
    with open(path, "ab") as handle:
        handle.write(b'102}\n')
    assert tail.new_lines() == [b'{"n":102}']


def test_the_restart_bench_generates_segments_and_reports_its_figures(tmp_path: Path, capsys) -> None:
    """`python -m bench.trace_restart`: generate writes segments and checkpoints as the
    broker does; recover reports the figures, with the unfinished emails back in flight."""
    from bench import trace_restart

    assert trace_restart.main(["generate", str(tmp_path), "0.004", "--segment-bytes", "100000"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["checkpoints"] >= 5 and 2500 < made["bytes_per_email"] < 4000
    assert len(tracefiles.closed(tmp_path / "trace.jsonl")) == made["checkpoints"]
    assert trace_restart.main(["recover", str(tmp_path)]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert set(measured) == {"trace_bytes", "seconds", "in_flight", "effects", "peak_rss_mib"}
    assert measured["in_flight"] == trace_restart.LIVE_TAIL // 2 and measured["trace_bytes"] > 2_000_000


def test_approve_waits_for_the_outcome_reading_old_segments_once(tmp_path: Path, monkeypatch) -> None:
    """`airlock approve` polls for the outcome after its decision: closed segments (the
    escalation, the decision) are read once, not at every poll, and still found."""
    from ops import escalations

    path = tmp_path / "trace.jsonl"
    tracefiles.segment_path(path, 1).write_bytes(trace_lines.received("e"))
    tracefiles.segment_path(path, 2).write_bytes(trace_lines.decision("e"))
    path.write_bytes(b"")
    polls = []

    def broker_turn(_seconds: float) -> None:
        polls.append(1)
        if len(polls) == 3:
            with open(path, "ab") as handle:
                handle.write(trace_lines.outcome("e"))

    monkeypatch.setattr(escalations.time, "sleep", broker_turn)
    seen = _opened(monkeypatch)
    assert escalations.decision_refused(path, "e", timeout_s=60) == ""
    assert len(polls) == 3
    assert seen.count(tracefiles.segment_path(path, 1)) == seen.count(tracefiles.segment_path(path, 2)) == 1


def test_a_broker_killed_while_folding_an_old_trace_goes_on_from_where_it_was(settings, monkeypatch) -> None:
    """The first start on an old trace of GBs folds it once; killed meanwhile (a stuck rule
    measuring time), the next start resumes from the saved offset instead of looping."""
    settings.data_dir.mkdir(parents=True)
    old = b"".join(line for n in range(300) for line in _email(f"m-{n}", "completed")) + b"".join(_email("w-1", None))
    settings.trace_path.write_bytes(old)
    journal = Journal(settings.data_dir / "journal.bin")
    writer = trace.TraceWriter(settings.trace_path, SEGMENT)
    real, saves = files_module.write_private, []

    def killed_after_two_saves(where: Path, data: bytes) -> None:
        saves.append(data)
        if len(saves) > 2:
            raise KeyboardInterrupt  # as SIGKILL would, mid-fold
        real(where, data)

    monkeypatch.setattr(tracefiles.files, "write_private", killed_after_two_saves)
    with pytest.raises(KeyboardInterrupt):
        tracefiles.write_checkpoint(settings.trace_path, journal.sizes.keys(), save_every=len(old) // 5)
    partial = tracefiles.load(settings.trace_path)
    assert partial.through == 0 and 0 < partial.folded < len(old)
    monkeypatch.setattr(tracefiles.files, "write_private", real)
    unfinished = {i: what for i, what in trace.states(settings.trace_path).items() if what != "final"}
    assert unfinished == {"w-1": "open"}  # a restart meanwhile reads the partial checkpoint right
    starts = []
    fold_from = tracefiles._fold_from

    def spied(state: dict[str, str], segment: Path, start: int, every: int = 0):
        starts.append(start)
        yield from fold_from(state, segment, start, every)

    monkeypatch.setattr(tracefiles, "_fold_from", spied)
    taken = tracefiles.write_checkpoint(settings.trace_path, journal.sizes.keys(), save_every=len(old) // 5)
    assert starts == [partial.folded] and taken is not None and taken.through == 1 and taken.folded == 0
    assert trace.states(settings.trace_path) == {"w-1": "open"}
    writer.close()
    journal.close()


def test_a_fold_and_a_compaction_hand_freed_memory_back(settings, monkeypatch) -> None:
    """The broker's heap keeps what its churn freed unless told (the soak's RSS rose 13 MiB per
    100,000 emails with flat Python objects): each checkpoint fold and each journal compaction
    asks glibc to give it back. The soak benchmark shows the effect; this shows the wiring."""
    trims: list[int] = []
    monkeypatch.setattr(housekeeping, "_malloc_trim", trims.append)
    journal = Journal(settings.data_dir / "journal.bin", compact_bytes=1)
    writer = trace.TraceWriter(settings.trace_path, SEGMENT)
    for n in range(40):
        for line in _email(f"m-{n}", "completed"):
            writer.write(line)
        writer.flush()
    assert writer.rotated
    housekeeping.checkpoint(settings, writer, journal)
    assert trims == [0]
    journal.append(QueuedEmail("m-1", b"Subject: a\n\nbody", "eml"))
    housekeeping.compact(Router(settings, boot=1), journal, writer)
    assert trims == [0, 0]
    writer.close()
    journal.close()
