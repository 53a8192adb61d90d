"""The persisted records: every trace line and every call-log line, typed. The second contract.

airlock.wire says what goes between processes; this module says what is kept on disk and
read back: trace.jsonl (written by the broker alone: airlock.trace) and calls.jsonl (written
by the actor alone: the call log). Each line is one JSON object; each event is a tagged
Struct below (the base, Record, is in airlock.recordbase and the broker's records about
no one email in airlock.recordfacts, both only to keep this module small: import every
record from here), its tag in `event`. Every line has `at` (UTC, ISO 8601), `message_id` (null for
a fact about no one email) and `stage` (who said it: stamped by the broker from the endpoint
a fact came in on, never taken from the sender); each email ends with exactly one `outcome`.

One encoder (`encode`) writes them and one typed decoder (`decode`, `decode_call`) reads them
back for every reader: `airlock trace`, attack, score, the page, bench, `airlock pending`, the
labs' graders. Two readers take a lenient view instead, of the few fields a damaged line must
still yield: the actor's ledger its call keys (`call_entry_of`, below) and recovery and the
checkpoint each email's state (airlock.tracefiles.fold). What no Struct here describes still
decodes to a typed value, never an exception and never a guess:

    PeerFact      a worker's own event (`worker.<name>`) or a supervisor notice: free detail
    Unrecognized  a JSON object whose event this version does not know (a newer writer's)
    Damaged       not a whole JSON object, a known event whose fields do not fit its type,
                  or a known event from a stage that may not say it (a torn line, an edit)

Readers show the last two escaped (airlock.trace.render) and act on neither.

One call record, two files: `Call` is the line the actor appends to calls.jsonl once the
tool answered (what airlock *did*; attack scoring and the graders read it), after the
`Intent` it appended and fsynced before calling the tool (its claim of the step's key).
The trace's line for a plan step is `Step`: its decision and, for a step that ran, the call as
the actor answered it (status, error, key, plan) and what the tool returned, in one line.
Older traces hold three lines per step instead (`authorization`, and for a step
that ran `call` and `observation`). Every reader reads both shapes alike through `expand`,
which turns a Step into exactly those three records: readers match on Authorization, Call
and Observation, and a trace reads the same whichever version wrote it.

The rule for changing a record (tested on traces earlier versions wrote,
tests/data/trace-v1.jsonl and trace-v2.jsonl):
1. A new field gets a default, and `omit_defaults` leaves it out of every line that does not
   use it: a line that never needed it reads, and is written, as before.
2. Decoders ignore fields they do not know: an older reader skips a newer field. That is
   safe only because of rule 3, which is why it is a rule and not a habit.
3. A change an older reader must not miss (a new meaning, a new value that readers would
   misjudge, a field that makes a line say something else) is a new event, never a new
   field: an older reader then sees an Unrecognized line, shows it and acts on nothing.
   Renaming or retyping a field is such a change.
Why ignore rather than refuse unknown fields, for a security tool: the wire refuses them
(a peer is untrusted); these files are written by airlock's own broker and actor, and
refusing would turn one added field into whole lines an older recovery or scorer no longer
sees (an email redone, a call not counted). Rule 3 keeps ignoring exact.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, NamedTuple

import msgspec

from airlock.recordbase import Record as Record, utc_now as utc_now
from airlock.recordfacts import (
    AuthRefused as AuthRefused,
    ClientGone as ClientGone,
    HandshakeFailed as HandshakeFailed,
    JournalCompacted as JournalCompacted,
    JournalCompactionFailed as JournalCompactionFailed,
    JournalDamaged as JournalDamaged,
    MalformedFrame as MalformedFrame,
    Started as Started,
    Stopped as Stopped,
    StorageFailed as StorageFailed,
    StorageRecovered as StorageRecovered,
    TraceCheckpoint as TraceCheckpoint,
    TraceCheckpointFailed as TraceCheckpointFailed,
    TraceDamaged as TraceDamaged,
    Violation as Violation,
    WorkerJoined as WorkerJoined,
    WorkerLost as WorkerLost,
)
from airlock.wire import CallStatus, Detail, EmailFormat, Note, Outcome, ReadingSource, Scalar

WORKER_STAGES = ("reader", "validator", "actor")
WORKER_PREFIX = "worker."  # a worker's Event `note` is written as `worker.note` (broker.events)
SUPERVISOR = "supervisor"  # a supervisor's Notice is written under its own name, this stage
DAMAGED_TEXT_LIMIT = 500  # characters of a damaged line a Damaged value keeps


# --- the broker's own facts about one email -------------------------------------------------


class Received(Record, tag="received", frozen=True, kw_only=True):
    """The broker's fact that an `Email` (airlock.wire) arrived and was given its id: where it
    came from, its format and size, and the sender with the proof the broker kept. Never the
    raw email: that stays in the journal (a QueuedEmail) and goes only to a reader."""

    origin: str
    format: EmailFormat
    bytes: int
    sender: str
    sender_proof: str


class Recovered(Record, tag="recovered", frozen=True, kw_only=True):
    """A journalled email an earlier broker accepted and never finished, queued again."""

    origin: str
    bytes: int
    waited_on_disk: bool = False  # its raw email waited on disk for room first


class Redelivery(Record, tag="redelivery", frozen=True, kw_only=True):
    to: str
    reason: str
    attempt: int


class LateResult(Record, tag="late_result", frozen=True, kw_only=True):
    """A worker's answer for an email it no longer holds: recorded, changes nothing."""

    endpoint: str
    result: str


class DecisionTaken(Record, tag="decision", frozen=True, kw_only=True):
    """A person's decision, taken: from that person's own key (CURVE), in their name."""

    layer: str
    approve: bool
    role: str
    by: str
    key: str
    proven: str


class DecisionRefused(Record, tag="decision_refused", frozen=True, kw_only=True):
    layer: str
    claimed_by: str
    role: str
    reason: str


class OutcomeLine(Record, tag="outcome", frozen=True, kw_only=True):
    """The email's outcome: exactly one final one (`escalated` waits for a person and is
    followed by another). `final` and `ms` are absent on an outcome given at recovery."""

    outcome: Outcome
    reason: str
    ended_at: str
    final: bool | None = None
    ms: float | None = None
    rule: str = ""  # the rule that rejected it, when one did
    no_worker_s: float | None = None  # how long it waited for a worker of its stage, when none came


# --- what the workers answered, as the broker records it --------------------------------------


class _ReaderLine(Record, frozen=True, kw_only=True):
    """What a reader noted about the email (wire.Reading.notes), each note in its own field,
    typed as the wire admits it (the reader is the untrusted stage: readers escape them).
    A note this contract does not name is kept apart in `other_notes`, never as a field."""

    STAGE: ClassVar[str] = "reader"
    sender: Note = None
    subject: Note = None
    excerpt: Note = None
    body_chars: Note = None
    prompt_cut: Note = None
    attachments: Note = None
    defects: Note = None
    digest: Note = None
    model_ms: Note = None
    model_error: Note = None
    constraint: Note = None  # what the model decoded under (reader/constraint.py): "gbnf", "json_schema"
    other_notes: Detail = {}


NOTE_FIELDS = frozenset(name for name in _ReaderLine.__struct_fields__ if name not in Record.__struct_fields__
                        and name != "other_notes")


def notes(detail: Detail) -> dict[str, Any]:
    """A reader's notes as keyword fields of a reader line: the named ones in their fields,
    any other in `other_notes` (so none can stand for a field the broker sets)."""
    named: dict[str, Any] = {key: value for key, value in detail.items() if key in NOTE_FIELDS}
    if len(named) < len(detail):
        named["other_notes"] = {key: value for key, value in detail.items() if key not in NOTE_FIELDS}
    return named


class ModelAnswer(_ReaderLine, tag="model_answer", frozen=True, kw_only=True):
    layer: str
    answer: str  # the first broker.tracing.TRACE_TEXT_LIMIT characters
    answer_chars: int
    source: ReadingSource
    truncated: bool
    # wire.Reading.grounded: whether the reader's code found the answer in the email. None
    # (left out) on lines written before the field existed and where nothing was checked: "not known",
    # never "not in the email". A new field, not a new event (rule 1): an older reader that
    # skips it loses a fact for people, and acts on nothing it would misjudge.
    grounded: bool | None = None


class Unreadable(_ReaderLine, tag="unreadable", frozen=True, kw_only=True):
    layer: str
    rule: str
    reason: str


class Verdict(Record, tag="verdict", frozen=True, kw_only=True):
    """The validator's verdict: `value` when passed, `rule` and `reason` when rejected.
    `student`: the lab plug point whose student code took part (absent when none did)."""

    STAGE: ClassVar[str] = "validator"
    layer: str
    verdict: Literal["passed", "rejected"]
    value: int | str | None = None
    rule: str = ""
    reason: str = ""
    student: str = ""


class Authorization(Record, tag="authorization", frozen=True, kw_only=True):
    """One plan step's decision record (actor.preconditions builds `decision`: verdict,
    rules run, facts read, who decided); every step has one, whether it ran or not. A
    Step's first part (expand); its own line in traces written before Step."""

    STAGE: ClassVar[str] = "actor"
    layer: str
    step: int
    server: str
    tool: str
    key: str
    decision: dict[str, Any]
    student: str = ""


class Call(Record, tag="call", frozen=True, kw_only=True):
    """One tool call: the one call record of calls.jsonl and of the trace's call line.

    calls.jsonl (the actor, once the tool answered, after its Intent): at, message_id, step,
    server, tool, args, and `to` (a mail tool's recipient), `student` and `result` (what the
    tool returned, kept so that a replay of the step is answered from here and the tool is
    never asked again) when set; stage, layer, status, error, key are absent (None). The
    trace (a Step that ran, through expand; its own line in traces written before Step):
    stage "actor", layer "execution", status, error, key, and the task and plan it ran under
    when the actor named them; `to` and `result` are absent (the trace's Observation has
    the result). calls.jsonl lines written before it had `event` read too.

    `unknown` (trace only): the step's key was claimed by an Intent and its tool called, but
    no Call follows it (the actor stopped in between, or the tool failed or overran): it may
    or may not have taken effect, so it is never run again and a person must check."""

    STAGE: ClassVar[str] = "actor"
    message_id: str
    stage: str | None = None  # type: ignore[assignment]  # calls.jsonl lines have none
    step: int
    server: str
    tool: str
    args: dict[str, Scalar]
    layer: str | None = None
    status: CallStatus | None = None
    error: str | None = None
    key: str | None = None
    task: str = ""
    plan: list[tuple[str, str]] = []
    to: str = ""
    student: str = ""
    result: dict[str, Any] | None = None


class Intent(Record, tag="intent", frozen=True, kw_only=True):
    """calls.jsonl only: the call the actor is about to make, fsynced before its tool runs.
    Its key is then claimed for good: a Call line for the same message_id and step follows
    once the tool answered; an Intent with none after it is a call whose effect is unknown
    (airlock never runs it again, and says `unknown`). A new event (rule 3): a reader that
    knows only Call sees it as damaged, never as a call that ran."""

    STAGE: ClassVar[str] = "actor"
    message_id: str
    stage: str | None = None  # type: ignore[assignment]  # calls.jsonl lines have none
    step: int
    server: str
    tool: str
    args: dict[str, Scalar]
    student: str = ""


class Observation(Record, tag="observation", frozen=True, kw_only=True):
    """What a call returned (withheld outside the data folder: airlock.published). A Step
    that ran gives one (expand); its own line in traces written before Step."""

    STAGE: ClassVar[str] = "actor"
    layer: str
    step: int
    server: str
    tool: str
    result: dict[str, Any]
    student: str = ""


class Step(Record, tag="step", frozen=True, kw_only=True):
    """One plan step in one line (older traces hold Authorization, Call and Observation
    lines instead, which repeated the base fields, step, server, tool and student). `expand` gives those
    three back field for field: nothing is lost and no reader handles two shapes.
    Every step has the Authorization's `key` and `decision`; one that ran (a refused or
    escalated one did not) has `status` and the Call's and Observation's fields too. A new
    event (rule 3): an older reader shows it unrecognized, never a step half-read."""

    STAGE: ClassVar[str] = "actor"
    message_id: str  # about one email always, as a Call is
    stage: str  # again only to keep the base fields in their order in the line
    step: int
    server: str
    tool: str
    key: str
    decision: dict[str, Any]
    student: str = ""
    status: Literal["ok", "error", "replayed", "unknown"] | None = None
    args: dict[str, Scalar] = {}
    error: str = ""
    task: str = ""
    plan: list[tuple[str, str]] = []
    result: dict[str, Any] = {}

Event = (
    Received | Recovered | Redelivery | LateResult | DecisionTaken | DecisionRefused | OutcomeLine
    | ModelAnswer | Unreadable | Verdict | Authorization | Call | Observation | Step
    | Violation | MalformedFrame | ClientGone | WorkerJoined | WorkerLost | Started | Stopped | AuthRefused
    | HandshakeFailed | StorageFailed | StorageRecovered | JournalCompacted | JournalCompactionFailed
    | JournalDamaged | TraceDamaged | TraceCheckpoint | TraceCheckpointFailed
)
EVENT_TYPES: tuple[type[Record], ...] = Event.__args__  # a Union's members
EVENT_NAMES = frozenset(kind.__struct_config__.tag for kind in EVENT_TYPES)


# --- what no Struct above describes --------------------------------------------------------


class PeerFact(msgspec.Struct, frozen=True):
    """A worker's own event (stage reader/validator/actor, event `worker.<name>`) or a
    supervisor notice (stage supervisor, e.g. service_restarted): a name the broker checked
    (broker.events) and a flat detail, written flat beside the base fields, every text in it
    escaped by the broker."""

    at: str
    message_id: str | None
    stage: str
    event: str
    detail: Detail = {}


class Unrecognized(msgspec.Struct, frozen=True):
    """A JSON object whose event this version does not know: shown escaped, acted on never."""

    at: Any
    message_id: Any
    stage: Any
    event: Any
    fields: dict[str, Any]


class Damaged(msgspec.Struct, frozen=True):
    """A line that is not a record: not a JSON object, torn, or a known event whose fields
    do not fit (`reason` says which: msgspec's error with its path, or the stage)."""

    reason: str
    text: str  # the line's first DAMAGED_TEXT_LIMIT characters, undecoded bytes replaced


TraceRecord = Event | PeerFact | Unrecognized | Damaged
BASE_FIELDS = ("at", "message_id", "stage", "event")

_encoder = msgspec.json.Encoder()
_decode_event = msgspec.json.Decoder(Event).decode
_decode_call = msgspec.json.Decoder(Call).decode
_decode_intent = msgspec.json.Decoder(Intent).decode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode


def encode(record: Record | PeerFact) -> bytes:
    """One line: the record as a JSON object and a newline."""
    if isinstance(record, PeerFact):
        base = {"at": record.at, "message_id": record.message_id, "stage": record.stage, "event": record.event}
        return _encoder.encode({**base, **record.detail, **base}) + b"\n"  # the base fields win
    return _encoder.encode(record) + b"\n"


def decode(raw: bytes) -> TraceRecord:
    """One trace line as its record; never raises."""
    try:
        record = _decode_event(raw)
    except msgspec.ValidationError as exc:
        return _untyped(raw, str(exc))
    except msgspec.DecodeError as exc:
        return _damaged(raw, str(exc))
    if record.stage != record.STAGE:
        return _damaged(raw, f"the {record.stage!r} stage may not say {type(record).__struct_config__.tag!r}")
    return record


def decode_call(raw: bytes) -> Call | Intent | Damaged:
    """One calls.jsonl line (no `event` or `stage` in lines from before they shared a type)."""
    try:
        return _decode_call(raw)
    except msgspec.ValidationError as exc:
        if b'"intent"' in raw:
            try:
                return _decode_intent(raw)
            except msgspec.DecodeError:
                pass
        return _damaged(raw, str(exc))
    except msgspec.DecodeError as exc:
        return _damaged(raw, str(exc))


def expand(record: TraceRecord) -> tuple[TraceRecord, ...]:
    """The records a trace line stands for, as every reader takes it (airlock.trace's
    readers, escalations, the page's feed): a Step is its Authorization and, if it ran, its
    Call and Observation, exactly as lines written before Step held them; any other record
    is itself. So a trace reads the same whichever version wrote it."""
    if not isinstance(record, Step):
        return (record,)
    r = record
    authorization = Authorization(r.at, r.message_id, r.stage, layer="authorization", step=r.step, server=r.server,
                                  tool=r.tool, key=r.key, decision=r.decision, student=r.student)
    if r.status is None:
        return (authorization,)
    return (authorization,
            Call(at=r.at, message_id=r.message_id, stage=r.stage, layer="execution", step=r.step, server=r.server,
                 tool=r.tool, args=r.args, status=r.status, error=r.error, key=r.key, task=r.task, plan=r.plan,
                 student=r.student),
            Observation(r.at, r.message_id, r.stage, layer="observation", step=r.step, server=r.server, tool=r.tool,
                        result=r.result, student=r.student))


def _untyped(raw: bytes, error: str) -> TraceRecord:
    """A line the union refused: a peer's fact, an event this version does not know, or
    damage (a known event that does not fit its type)."""
    try:
        fields = _decode_object(raw)
    except msgspec.DecodeError as exc:
        return _damaged(raw, str(exc))
    event, stage, message_id, at = (fields.pop(key, None) for key in ("event", "stage", "message_id", "at"))
    if event in EVENT_NAMES:
        return _damaged(raw, error)
    if isinstance(event, str) and isinstance(at, str) and isinstance(message_id, (str, type(None))) and (
            (stage in WORKER_STAGES and event.startswith(WORKER_PREFIX)) or stage == SUPERVISOR):
        try:
            return PeerFact(at, message_id, stage, event, msgspec.convert(fields, Detail))
        except msgspec.ValidationError as exc:
            return _damaged(raw, f"a peer's detail: {exc}")
    return Unrecognized(at, message_id, stage, event, fields)


def _damaged(raw: bytes, reason: str) -> Damaged:
    return Damaged(reason, raw[:DAMAGED_TEXT_LIMIT * 4].decode("utf-8", "replace")[:DAMAGED_TEXT_LIMIT].rstrip("\n"))


class _CallKey(msgspec.Struct):
    message_id: object = None
    step: object = None
    event: object = None


_decode_call_key = msgspec.json.Decoder(_CallKey).decode


class CallEntry(NamedTuple):
    """What the actor's ledger reads back from one calls.jsonl line (call_entry_of)."""
    message_id: str
    step: int
    intent: bool  # an Intent: claimed, its tool about to run; else the call ran


def call_entry_of(raw: bytes) -> CallEntry | None:
    """The key of a calls.jsonl line and whether it is an intent, or None for a line that
    names none (torn). The actor's idempotency ledger rebuilds its keys with this, not with
    decode_call, and is lenient on purpose: a record whose other fields were damaged still
    says its call was claimed, so it must never run again."""
    try:
        key = _decode_call_key(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(key.message_id, str) and isinstance(key.step, int) and not isinstance(key.step, bool):
        return CallEntry(key.message_id, key.step, key.event == "intent")
    return None
