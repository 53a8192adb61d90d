"""Every wire decoder against hostile frames: it answers, it never raises.

Each generated frame goes through all eight decoders (each role's inbound decoder and each
outbound decoder), so every decoder sees every frame of every family: random bytes, real
frames of every message type with bytes flipped, inserted, deleted or cut, real frames with
a field swapped for a random value, and msgpack of random nested values. Then deep nesting,
built as bytes: 10,000 and 100,000 levels, bare and inside a real message's detail, notes
or record fields, and length headers that claim gigabytes.

The verdict is always a message of the role's union, a Malformed or a Violation; a message
re-encodes to a frame that decodes to an equal message.
"""

from __future__ import annotations

import datetime
import math
import typing

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from airlock import wire
from airlock.wire import (
    Accepted,
    Await,
    Call,
    Decide,
    Decision,
    Done,
    Event,
    Hello,
    Malformed,
    Notice,
    Passed,
    Ping,
    Read,
    Reading,
    Refused,
    Rejected,
    Result,
    Status,
    Submit,
    Unreadable,
    Violation,
    encode,
    inbound_decoder,
    outbound_decoder,
)
from tests.conftest import examples

EXAMPLES = examples(2_000)  # frames per family (deep profile; a quarter under quick); each meets all eight decoders

SEED_EMAIL = b"From: anna@example.com\nSubject: Bestellung\n\nHallo, Bestellung 4411 bitte.\n"
SAMPLES: list[wire.Message] = [
    Submit(ref=1, raw=SEED_EMAIL, format="eml", origin="cli", sender="anna@example.com"),
    Submit(ref=2**63, raw=b"", format="text"),
    Await(ref=2, ids=["m-1", "m-2"]),
    Ping(ref=3),
    Decide(ref=4, message_id="m-1", approve=True, role="support-lead", by="dana"),
    Notice(event="service_restarted", detail={"service": "reader", "attempt": 2, "backoff_s": 0.5,
                                              "codes": [1, None, "x"], "env": {"a": True}}),
    Accepted(ref=1, message_id="m-1"),
    Refused(ref=1, reason="over 256 KiB"),
    Result(message_id="m-1", outcome="completed", reason="ok"),
    Status(ref=5, workers={"reader": 1, "actor": 2}, queued=3, in_flight=-1),
    Hello(credit=3),
    Read(message_id="m-1", raw=SEED_EMAIL, format="eml"),
    Reading(message_id="m-1", answer="4411", source="model", truncated=True,
            notes={"sender": "anna@example.com", "body_chars": 55, "prompt_cut": False,
                   "attachments": ["a.pdf"], "model_ms": 1.5}),
    Unreadable(message_id="m-1", rule="mail.broken", reason="cannot parse", notes={"defects": []}),
    Passed(message_id="m-1", value="4411", sender="anna@example.com"),
    Passed(message_id="m-1", value=-7),
    Decision(message_id="m-1", approve=False, role="support-lead", by="dana"),
    Rejected(message_id="m-1", rule="digits.pattern", reason="'4411 bitte' is not 1-6 ASCII digits"),
    Done(message_id="m-1", outcome="completed", reason="", calls=[Call(
        step=1, server="shop", tool="lookup_order", args={"order_id": "4411", "n": 1.0, "x": None},
        status="ok", key="m-1:1", decision={"rules": [{"name": "evidence", "result": "allow"}]},
        result={"status": "shipped", "items": [1, 2.5, None, b"\x00"]})]),
    Event(event="model_answer", message_id="m-1", detail={"answer": "4411", "ms": 3.25}),
]


def _members(union: object) -> tuple[type[wire.Message], ...]:
    return typing.get_args(union) or (union,)


def _fieldless(cls: type[wire.Message]) -> bool:
    return len(cls.__struct_defaults__) == len(cls.__struct_fields__)


def _tag(cls: type[wire.Message]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), cls  # every wire message is tagged by name
    return tag


# A message type added later with no required field gets its sample here; one with
# required fields fails test_samples_cover_every_message_type until SAMPLES has it.
SAMPLES += [cls() for cls in _members(wire.AnyMessage)
            if _fieldless(cls) and cls not in {type(m) for m in SAMPLES}]
TAGS = {_tag(type(m)) for m in SAMPLES}
FIELDS = sorted({f for m in SAMPLES for f in type(m).__struct_fields__} | {"kind"})


DECODERS = [(f"{role} inbound", inbound_decoder(role), _members(wire.INBOUND[role])) for role in wire.ROLES] + [
    (f"broker to {role}", outbound_decoder(role), _members(wire.OUTBOUND[role])) for role in wire.ROLES]


def test_samples_cover_every_message_type() -> None:
    """The mutated frames start from a real message of every type on the wire."""
    assert {type(m) for m in SAMPLES} == set(_members(wire.AnyMessage))


def _has_nan(value: object) -> bool:
    if isinstance(value, msgspec.Struct):
        return any(_has_nan(v) for v in msgspec.structs.astuple(value))
    if isinstance(value, dict):
        return any(_has_nan(k) or _has_nan(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    return isinstance(value, float) and math.isnan(value)


def judge(frame: bytes) -> None:
    """Every decoder answers with a message of its union, Malformed or Violation, and a
    message survives re-encoding."""
    for name, decode, allowed in DECODERS:
        try:
            result = decode(frame)
        except Exception as exc:  # RecursionError and MemoryError included: nothing may escape
            raise AssertionError(f"{name} raised {type(exc).__name__}: {exc}") from exc
        match result:
            case Malformed(reason=reason, size=size):
                assert reason and size == len(frame), (name, result)
            case Violation(kind=kind, reason=reason):
                assert kind in TAGS and reason, (name, result)
                assert kind not in {_tag(m) for m in allowed}, (name, result)
                assert _tag(type(msgspec.msgpack.decode(frame, type=wire.AnyMessage))) == kind
            case message:
                assert type(message) in allowed, (name, message)
                again = decode(encode(message))
                assert type(again) is type(message) and encode(again) == encode(message), (name, message)
                assert again == message or _has_nan(message), (name, message)


# --- families of frames

sample_messages = st.sampled_from(SAMPLES)
sample_tags = st.sampled_from(sorted(TAGS))
frames_of_samples = st.sampled_from([encode(m) for m in SAMPLES])


@st.composite
def byte_mutations(draw: st.DrawFn) -> bytes:
    """A real frame with 1-6 bytes flipped, replaced, inserted or deleted, or cut short."""
    frame = bytearray(draw(frames_of_samples))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, max(len(frame) - 1, 0)))
        kind = draw(st.sampled_from(("flip", "replace", "insert", "delete", "truncate", "splice")))
        if kind == "flip" and frame:
            frame[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "replace" and frame:
            frame[at] = draw(st.one_of(st.integers(0, 255), st.sampled_from(  # msgpack type markers
                (0x00, 0x7F, 0x80, 0x90, 0xA0, 0xC0, 0xC1, 0xC2, 0xC3, 0xCA, 0xCB, 0xCF, 0xD3, 0xD9,
                 0xDC, 0xDE, 0xFF))))
        elif kind == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del frame[at:at + draw(st.integers(1, 4))]
        elif kind == "truncate":
            del frame[at:]
        elif kind == "splice":  # a slice of another real frame pasted in
            other = draw(frames_of_samples)
            start = draw(st.integers(0, len(other)))
            frame[at:at] = other[start:start + draw(st.integers(1, 16))]
    return bytes(frame)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.binary(max_size=20),
    st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=12)),
    st.datetimes(timezones=st.just(datetime.UTC)),
)
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=10), st.integers(-5, 5))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)


@st.composite
def field_mutations(draw: st.DrawFn) -> bytes:
    """A real message with one field swapped, dropped, added, or its kind changed."""
    fields = dict(msgspec.msgpack.decode(encode(draw(sample_messages))))
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from((*sorted(fields), *FIELDS)))
        kind = draw(st.sampled_from(("swap", "drop", "kind")))
        if kind == "swap":
            fields[name] = draw(values)
        elif kind == "drop":
            fields.pop(name, None)
        else:
            fields["kind"] = draw(sample_tags)
    return msgspec.msgpack.encode(fields)


small_values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(keys, scalars, max_size=3))


@st.composite
def message_shaped(draw: st.DrawFn) -> dict:
    """A message type's tag and field names, each field present or not, with random values."""
    cls = type(draw(sample_messages))
    shaped = {"kind": cls.__struct_config__.tag}
    for name in cls.__struct_fields__:
        if draw(st.integers(0, 3)):
            shaped[name] = draw(small_values)
    return shaped


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes(frame: bytes) -> None:
    """Random bytes, up to 4 KiB."""
    judge(frame)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.one_of(frames_of_samples, byte_mutations(), field_mutations()))
def test_mutated_real_frames(frame: bytes) -> None:
    """Real frames of every message type, intact or damaged byte-wise or field-wise."""
    judge(frame)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.one_of(values, message_shaped()).map(msgspec.msgpack.encode))
def test_msgpack_of_random_values(frame: bytes) -> None:
    """Well-formed msgpack of random nested values, some shaped like messages."""
    judge(frame)


# --- deep nesting and lying length headers, built as bytes


def _inside(message: wire.Message, nest: bytes) -> bytes:
    """The message's frame with its last value (a None placeholder) replaced by `nest`."""
    frame = encode(message)
    assert frame.endswith(b"\xc0")
    return frame[:-1] + nest


def _nested(shape: str, depth: int) -> bytes:
    unit = {"array": b"\x91", "map": b"\x81\xa1k", "array32": b"\xdd\x00\x00\x00\x01",
            "map-of-array": b"\x81\xa1k\x91"}[shape]
    return unit * depth + b"\xc0"


CARRIERS: dict[str, wire.Message | None] = {  # a real message whose last encoded value can carry a nested value
    "bare": None,
    "event.detail": Event(event="x", message_id="m", detail={"deep": None}),
    "notice.detail": Notice(event="x", detail={"deep": None}),
    "reading.notes": Reading(message_id="m", answer="4411", source="model", notes={"deep": None}),
    "unreadable.notes": Unreadable(message_id="m", rule="r", reason="x", notes={"deep": None}),
    "call.result": Done(message_id="m", outcome="completed", calls=[Call(
        step=1, server="s", tool="t", args={}, status="ok", result={"deep": None})]),
    "passed.value": Passed(message_id="m", value=None),  # type: ignore[arg-type]  # the placeholder _inside replaces
}


def _carried(carrier: str, nest: bytes) -> bytes:
    """`nest` as the last value of the carrier's frame, or alone for the bare carrier."""
    message = CARRIERS[carrier]
    return nest if message is None else _inside(message, nest)


@pytest.mark.parametrize("depth", [10_000, 100_000])
@pytest.mark.parametrize("shape", ["array", "map", "array32", "map-of-array"])
@pytest.mark.parametrize("carrier", list(CARRIERS))
def test_deep_nesting(carrier: str, shape: str, depth: int) -> None:
    """Nesting far past any recursion limit is Malformed (or a Violation), never a crash."""
    nest = _nested(shape, depth)
    judge(_carried(carrier, nest))


def test_allowed_nesting_in_a_record_round_trips() -> None:
    """A Record (dict[str, Any]) nested 50 deep is a real Done and survives re-encoding."""
    frame = _carried("call.result", _nested("map", 50))
    assert isinstance(inbound_decoder("actor")(frame), Done)
    judge(frame)


LYING_HEADERS = [  # each claims about 4 GiB or 4 G elements that are not there
    b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff",
    b"\xc9\xff\xff\xff\xff\x01", b"\xdd\xff\xff\xff\xff" * 10_000, b"\xdf\xff\xff\xff\xff" * 10_000,
]


@pytest.mark.parametrize("header", LYING_HEADERS, ids=lambda h: f"{h[:5].hex()}x{len(h) // 5}")
@pytest.mark.parametrize("carrier", list(CARRIERS))
def test_length_headers_that_lie(carrier: str, header: bytes) -> None:
    """A length header claiming gigabytes allocates nothing and is Malformed."""
    judge(_carried(carrier, header))
