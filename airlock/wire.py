"""The wire contract: every message airlock sends, and who may send it.

Every message is a msgspec Struct encoded as msgpack (a map). A ZeroMQ frame carries one
message, or a batch: a msgpack array of up to MAX_BATCH messages, sent when several go to
the same peer at once (a ZeroMQ send and a CURVE box per frame cost more than the message).
The broker binds one endpoint per role; what a role may send is a union below, and each
endpoint decodes with its own typed decoder, built once. A message that does not decode
as the role's union becomes a `Malformed` value (with msgspec's error path, e.g. "at
$.value"); one that decodes as *another* role's message is a `Violation`. Neither is ever
raised, and in a batch each message is judged on its own.

Flow of an email:

    intake --Submit--> broker --Read--> reader --Reading--> broker --Reading--> validator
    validator --Passed|Rejected--> broker --Passed--> actor --Done--> broker
    broker --Accepted|Refused|Result|Status--> intake client
    intake --Decide--> broker --Decision--> actor (only for an email whose outcome is escalated)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from airlock.senders import SenderProof

Scalar = str | int | float | bool | None
# A decision record or tool result the actor builds itself: nested, but never from a peer
# it does not trust, and msgspec refuses absurd nesting on decode.
Record = dict[str, Any]
# Trace details are flat on purpose: two levels at most, so no decoder ever recurses deep.
Note = Scalar | list[Scalar] | dict[str, Scalar]  # one detail's value (a reader's note, say)
Detail = dict[str, Note]

Outcome = Literal["completed", "rejected", "refused", "escalated", "failed"]
# What became of one plan step's call. `unknown`: its key was claimed and its tool called,
# but no result was recorded (the actor stopped between the two, or the tool failed or
# overran): it may have taken effect, so it never runs again, and a person must check.
CallStatus = Literal["ok", "error", "refused", "escalated", "replayed", "unknown"]
ReadingSource = Literal["model", "recorded", "none"]
EmailFormat = Literal["eml", "text"]


class Message(
    msgspec.Struct,
    frozen=True,  # a message is a fact; nobody edits one in flight
    forbid_unknown_fields=True,  # an extra field is a protocol error, not something to ignore
    tag_field="kind",  # the union's discriminator, so one decoder can tell messages apart
    omit_defaults=True,
):
    """Base of every wire message."""


class Email(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """An email on its way, as an intake hands it over: the one name for the thing itself.

    Acts carry it: a client sends it to the broker in a `Submit`, the broker keeps it in its
    journal as a `QueuedEmail` (broker/journal.py) and hands its raw bytes and format to a
    reader in a `Read`; the trace records its arrival as `received` (airlock/records.py).
    `origin` names where it came from (a file, "smtp", "dashboard"). `sender` is the From
    address as the intake read it, never anything a model said; `sender_proof` says what
    proved it (airlock/senders.py). Not a message: it has no tag and never travels alone.
    """

    raw: bytes
    format: EmailFormat
    origin: str = ""
    sender: str = ""
    sender_proof: SenderProof = "none"


# --- intake clients (airlock inject, the supervisor, later the SMTP intake) -> broker


class Submit(Message, tag="submit", frozen=True):
    """A client hands the broker one `Email` for the reader queue. `ref` is the client's own
    counter, echoed back. The email's fields are flat on the wire (`carrying` builds one,
    `email` reads it back).

    Only the SMTP intake sets `sender_proof` to "dkim" or "authres", and the broker keeps it
    only from the SMTP intake's own key (keys.SMTP_ROLE); from any other client it is
    recorded as "none". "none" (unverified) cannot corroborate anything at the actor.
    The actor may check a proven sender against trusted records (a data-only defence);
    the reader never sees either.
    """

    ref: int
    raw: bytes
    format: EmailFormat
    origin: str = ""
    sender: str = ""
    sender_proof: SenderProof = "none"

    @classmethod
    def carrying(cls, ref: int, email: Email) -> Submit:
        """The Submit that hands over `email` under the client's `ref`."""
        return cls(ref=ref, raw=email.raw, format=email.format, origin=email.origin,
                   sender=email.sender, sender_proof=email.sender_proof)

    @property
    def email(self) -> Email:
        """The email this Submit carries."""
        return Email(raw=self.raw, format=self.format, origin=self.origin,
                     sender=self.sender, sender_proof=self.sender_proof)


class Await(Message, tag="await", frozen=True):
    """Ask for an Outcome for each id, sent as soon as it is known."""

    ref: int
    ids: list[str]


class Ping(Message, tag="ping", frozen=True):
    """Ask the broker for a Status."""

    ref: int


class Decide(Message, tag="decide", frozen=True):
    """A person's decision on an escalated step: approve or deny, as a named role. Taken
    only when sent with that person's own key (keys/people/<by>.key_secret); the broker
    refuses it from any other key, the intake's and the page's included."""

    ref: int
    message_id: str
    approve: bool
    role: str
    by: str


class Notice(Message, tag="notice", frozen=True):
    """A supervisor fact for the trace (a child restarted), not about any one email."""

    event: str
    detail: Detail = {}


# --- broker -> intake clients


class Accepted(Message, tag="accepted", frozen=True):
    ref: int
    message_id: str


# Why the broker refused a request, for a client to act on without parsing the reason:
# queue_full (the queue holds AIRLOCK_QUEUE_MAX_BYTES: retry later), too_many_ids (an Await
# over AIRLOCK_AWAIT_MAX_IDS), too_many_waiters (this client already waits on
# AIRLOCK_AWAIT_MAX_WAITERS ids), unknown_id, not_escalated, disk_full (the broker cannot
# write its journal or trace: a full disk or an I/O error; nothing was kept, send it again
# once space is freed); "" from a broker before codes.
RefusalCode = Literal["", "queue_full", "too_many_ids", "too_many_waiters", "unknown_id", "not_escalated",
                      "disk_full"]


class Refused(Message, tag="refused", frozen=True):
    ref: int
    reason: str
    message_id: str = ""  # the email it is about, when it names one (an Await for an unknown id)
    code: RefusalCode = ""


class Result(Message, tag="result", frozen=True):
    """The single recorded outcome of one email."""

    message_id: str
    outcome: Outcome
    reason: str = ""


class Waiting(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Emails at one stage (reader, validator, actor) that no worker holds and that are
    stuck: no worker of the stage is connected or heard from, or they wait to be sent again.

    `no_worker`: how many wait while no worker of the stage is connected or heard from
    within heartbeat liveness, and `no_worker_s` how long the longest of them has (the
    clock AIRLOCK_NO_WORKER_WAIT_S reads: from when it reached the stage or a worker of the
    stage was last heard from, the later).
    `limit_s`: that setting in the broker (0: they wait for ever). `redelivery`: how many
    wait to be sent again (their worker was lost or missed its deadline), the oldest for
    `redelivery_s`."""

    no_worker: int = 0
    no_worker_s: float = 0.0
    limit_s: float = 0.0
    redelivery: int = 0
    redelivery_s: float = 0.0


class Status(Message, tag="status", frozen=True):
    """`waiting` names only stages with stuck emails (see Waiting), so it is empty, and not
    sent at all, while mail flows: a client from before it still reads such a Status."""

    ref: int
    workers: dict[str, int]
    queued: int
    in_flight: int
    counters: dict[str, int] = {}  # refused frames, violations, redeliveries, outcomes
    waiting: dict[str, Waiting] = {}


# --- broker <-> workers


class Hello(Message, tag="hello", frozen=True):
    """A worker announces itself and how many messages it may hold at once. Sent again
    every heartbeat interval: to a broker that knows the worker it is a heartbeat, to a
    restarted broker it is a fresh registration.

    `worker` is a name the worker process draws at random when it starts and keeps across
    its reconnects, `connection` the number of its connection (1, 2, ...: each reconnect
    takes the next). Each new socket is a new identity to the broker's ROUTER, so these
    tell the broker which connections are one worker: the newest replaces the older ones,
    whose frames may still be queued at the broker after the worker closed them. A worker
    that sends neither is one worker per connection."""

    credit: int
    worker: Annotated[str, msgspec.Meta(max_length=64)] = ""
    connection: Annotated[int, msgspec.Meta(ge=0)] = 0


class Heartbeat(Message, tag="heartbeat", frozen=True):
    """The broker is alive. A worker that hears nothing for a few intervals reconnects."""


class Read(Message, tag="email", frozen=True):
    """An email for a reader to read: untrusted bytes and their format. Only a reader ever
    receives this, and it never carries the sender or its proof (those go to the actor)."""

    message_id: str
    raw: bytes
    format: EmailFormat


class Reading(Message, tag="reading", frozen=True):
    """The reader's raw answer: free text, so it goes to the validator and nowhere else.

    `notes` carry facts for the trace (sender, subject, model error); the broker records
    them and strips them before the validator sees the Reading. `no_answer_because` is set
    only with source "none": why neither the model nor a recording answered, so the
    rejection the email ends with says both, not just that the answer is empty. It is the
    one piece of reader text that leaves the validator: the validator cuts it to
    READER_EXPLANATION_LIMIT_CHARS and appends it to the Rejected reason, which the Result,
    the trace, the SMTP reply and the page then carry.

    `grounded` is the reader's code's finding (reader/grounding.py), never the model's: true
    when the answer occurs in the email the model read as a token of its own, false when it
    does not, None (left out on the wire) when nothing was checked (no answer, or a reader
    older than the field). A task with `[value] grounded = true` has the validator reject
    anything but true, so an older reader fails closed.
    """

    message_id: str
    answer: str
    source: ReadingSource
    truncated: bool = False
    notes: Detail = {}
    no_answer_because: str = ""
    grounded: bool | None = None


class Unreadable(Message, tag="unreadable", frozen=True):
    """The reader could not turn the email into a prompt (broken MIME, empty body...)."""

    message_id: str
    rule: str
    reason: str
    notes: Detail = {}


class Passed(Message, tag="passed", frozen=True):
    """A value of the task's narrow type: with a Decision, the only thing the actor receives.

    `sender` and `sender_proof` are set by the broker from the intake, never by the
    validator. `student` names the lab plug point (studentcode.student) whose code took part
    in this verdict, "" for none.
    """

    message_id: str
    value: int | str
    sender: str = ""
    sender_proof: SenderProof = "none"
    student: str = ""


class Decision(Message, tag="decision", frozen=True):
    """The broker passes a person's Decide on to the actor holding the escalated step.

    `by` is the person whose key sent it, as the broker proved it; `key` is that public
    key (z85), so the decision record names the key, not only a name."""

    message_id: str
    approve: bool
    role: str
    by: str
    key: str = ""


class Rejected(Message, tag="rejected", frozen=True):
    """The validator's refusal, with the rule that refused and a readable reason; `student`
    as on Passed."""

    message_id: str
    rule: str
    reason: str
    student: str = ""


class Call(Message, tag="call", frozen=True):
    """One plan step as the actor handled it, kept in trace layers: the authorization
    decision record, the execution (status, error type, idempotency key) and the
    observation (the tool's result, or a summary of it); the broker writes them in one
    trace line (airlock.records.Step)."""

    step: int
    server: str
    tool: str
    args: dict[str, Scalar]
    status: CallStatus
    error: str = ""
    key: str = ""
    decision: Record = {}
    result: Record = {}
    student: str = ""  # a lab: the plug point (e.g. "actor.select") whose student code took part in the decision


class Done(Message, tag="done", frozen=True):
    """The actor finished (or stopped) the plan for one value.

    `task` and `plan` name the task the actor runs and its plan's server/tool pairs, so the
    trace records, with each call, the plan it ran under: a page or scorer reading a data
    dir where several tasks ran judges each call against its own task's plan. Both default
    to empty (an actor from before they existed): readers then fall back to their own task.
    """

    message_id: str
    outcome: Outcome
    reason: str = ""
    calls: list[Call] = []
    task: str = ""
    plan: list[tuple[str, str]] = []


class Event(Message, tag="event", frozen=True):
    """A free-form trace fact from a worker; the broker stamps stage and time itself."""

    event: str
    message_id: str | None = None
    detail: Detail = {}


FromIntake = Submit | Await | Ping | Notice | Decide
ToIntake = Accepted | Refused | Result | Status
FromReader = Hello | Reading | Unreadable | Event
FromValidator = Hello | Passed | Rejected | Event
FromActor = Hello | Done | Event
AnyMessage = (
    Submit | Await | Ping | Notice | Decide | Accepted | Refused | Result | Status
    | Hello | Heartbeat | Read | Reading | Unreadable | Passed | Decision | Rejected | Done | Event
)

Role = Literal["intake", "reader", "validator", "actor"]
ROLES: tuple[Role, ...] = ("intake", "reader", "validator", "actor")

# What each role's endpoint accepts from its peers, and what its peers accept from the broker.
INBOUND = {"intake": FromIntake, "reader": FromReader, "validator": FromValidator, "actor": FromActor}
OUTBOUND = {"intake": ToIntake, "reader": Read | Heartbeat, "validator": Reading | Heartbeat,
            "actor": Passed | Decision | Heartbeat}


class Malformed(msgspec.Struct, frozen=True):
    """A frame that is not a message at all; carries msgspec's reason and error path."""

    reason: str
    size: int


class Violation(msgspec.Struct, frozen=True):
    """A well-formed message that this role is not allowed to send."""

    kind: str
    reason: str


_encoder = msgspec.msgpack.Encoder()
_any_decoder = msgspec.msgpack.Decoder(AnyMessage)

MAX_BATCH = 1024  # messages in one frame
BATCH_BYTES = 256 * 1024  # a batch stays within this; a single message may still be larger
# Under a frame cap, a batch leaves room for its array header and for CURVE's box around it:
# libzmq applies the cap to the message as it arrives, and drops the connection over it.
FRAME_OVERHEAD_BYTES = 1024
_ARRAY_MARKERS = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])  # msgpack fixarray, array 16, array 32
# The length is checked from the array header, before any element is read: a hostile
# frame declaring millions of tiny elements costs nothing (decoding them first cost 236 MB).
_batch_decoder = msgspec.msgpack.Decoder(Annotated[list[msgspec.Raw], msgspec.Meta(min_length=1, max_length=MAX_BATCH)])


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def _array_header(count: int) -> bytes:
    return bytes([0x90 | count]) if count < 16 else b"\xdc" + count.to_bytes(2, "big")


def batch_limit(max_frame_bytes: int) -> int:
    """The bytes a batch may take: BATCH_BYTES, and room under a receiver's frame cap."""
    return max(1, min(BATCH_BYTES, max_frame_bytes - FRAME_OVERHEAD_BYTES))


def grouped(items: list[bytes], limit: int, max_count: int | None = None) -> list[list[bytes]]:
    """`items` in order, in groups of at most `limit` bytes and `max_count` items; an item
    bigger than the limit goes alone, as it would ungrouped."""
    groups: list[list[bytes]] = []
    group: list[bytes] = []
    size = 0
    for item in items:
        if group and (len(group) == max_count or size + len(item) > limit):
            groups.append(group)
            group, size = [], 0
        group.append(item)
        size += len(item)
    if group:
        groups.append(group)
    return groups


def frames(messages: Sequence[Message], max_frame_bytes: int = BATCH_BYTES) -> list[tuple[int, bytes]]:
    """The frames that carry `messages` in order, each with how many it carries: one
    message as itself, several as an array (each encoded once, joined, not re-encoded),
    within batch_limit (the receiver's cap: libzmq drops the connection over it)."""
    groups = grouped([_encoder.encode(message) for message in messages], batch_limit(max_frame_bytes), MAX_BATCH)
    return [(1, group[0]) if len(group) == 1 else (len(group), _array_header(len(group)) + b"".join(group))
            for group in groups]


class RoleDecoder:
    """Decodes frames arriving on one role's endpoint: a message, Malformed or Violation."""

    def __init__(self, union: object, role: str) -> None:
        self._decoder = msgspec.msgpack.Decoder(union)
        self.role = role

    def frame(self, frame: bytes) -> list[Message | Malformed | Violation]:
        """Every message a frame carries, each decoded on its own; a frame that is not a
        message nor a batch of at most MAX_BATCH of them is one Malformed."""
        if not frame or frame[0] not in _ARRAY_MARKERS:
            return [self(frame)]
        try:
            parts = _batch_decoder.decode(frame)
        except Exception as exc:  # noqa: BLE001  including a length outside 1..MAX_BATCH
            return [Malformed(reason=f"not a batch of 1 to {MAX_BATCH} messages: {exc}", size=len(frame))]
        return [self(part) for part in parts]

    def __call__(self, frame: bytes | msgspec.Raw) -> Message | Malformed | Violation:
        try:
            return self._decoder.decode(frame)
        except msgspec.DecodeError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001  msgspec can raise others on hostile input; none may escape
            return Malformed(reason=f"{type(exc).__name__}: {exc}", size=len(frame))
        # Slow path only: is it a real message of another role (a violation) or garbage?
        try:
            other = _any_decoder.decode(frame)
        except Exception:  # noqa: BLE001  not any message either: garbage, named by the first error
            return Malformed(reason=str(error), size=len(frame))
        kind = type(other).__struct_config__.tag
        return Violation(kind=str(kind), reason=f"a {self.role} may not send '{kind}'")


def inbound_decoder(role: str) -> RoleDecoder:
    """The decoder for frames a peer of `role` sends to the broker."""
    return RoleDecoder(INBOUND[role], role)


def outbound_decoder(role: str) -> RoleDecoder:
    """The decoder a peer of `role` uses for frames the broker sends it."""
    return RoleDecoder(OUTBOUND[role], f"broker to {role}")
