"""The broker's trace records about no one email (message_id null): its start and stop, its
peers, its storage, its journal and its checkpoints.

Part of the trace contract that airlock.records owns and re-exports (read that module's
docstring for the rules); kept apart only so that module stays small. Import these from
airlock.records.
"""

from __future__ import annotations

from airlock.recordbase import Record


class Violation(Record, tag="violation", frozen=True, kw_only=True):
    """A peer sent what its endpoint may not (kind: the message's kind, or sender_proof)."""

    endpoint: str
    kind: str
    reason: str


class MalformedFrame(Record, tag="malformed_frame", frozen=True, kw_only=True):
    endpoint: str
    reason: str
    bytes: int


class ClientGone(Record, tag="client_gone", frozen=True, kw_only=True):
    messages: int


class WorkerJoined(Record, tag="worker_joined", frozen=True, kw_only=True):
    role: str
    credit: int


class WorkerLost(Record, tag="worker_lost", frozen=True, kw_only=True):
    role: str
    reason: str
    held: int


class Started(Record, tag="started", frozen=True, kw_only=True):
    endpoints: dict[str, str]
    trace: str
    authentication: str
    sender_proofs: str
    insecure: bool = False


class Stopped(Record, tag="stopped", frozen=True, kw_only=True):
    in_flight: int


class AuthRefused(Record, tag="auth_refused", frozen=True, kw_only=True):
    endpoint: str
    reason: str
    peer: str


class HandshakeFailed(Record, tag="handshake_failed", frozen=True, kw_only=True):
    endpoint: str
    peer: str
    errno: str
    stalled_s: float
    reason: str


class StorageFailed(Record, tag="storage_failed", frozen=True, kw_only=True):
    file: str
    error: str
    errno: str


class StorageRecovered(Record, tag="storage_recovered", frozen=True, kw_only=True):
    file: str
    failed_for_s: float
    refused: int
    lines_dropped: int | None = None  # the trace's: lines dropped while it failed


class JournalCompacted(Record, tag="journal_compacted", frozen=True, kw_only=True):
    bytes_before: int
    bytes_after: int
    freed: int
    live: int


class JournalCompactionFailed(Record, tag="journal_compaction_failed", frozen=True, kw_only=True):
    error: str
    bytes: int


class JournalDamaged(Record, tag="journal_damaged", frozen=True, kw_only=True):
    path: str
    ranges_skipped: int
    bytes_skipped: int
    ranges: list[list[int]]
    torn_tail: bool
    emails_lost: int


class TraceDamaged(Record, tag="trace_damaged", frozen=True, kw_only=True):
    """Lines a starting broker read past in the trace it recovers from (tracefiles.Unread):
    how many, by file. Each email such a line named is taken as open."""
    lines: int
    files: dict[str, int]


class TraceCheckpoint(Record, tag="trace_checkpoint", frozen=True, kw_only=True):
    through_segment: int
    emails: int


class TraceCheckpointFailed(Record, tag="trace_checkpoint_failed", frozen=True, kw_only=True):
    error: str
