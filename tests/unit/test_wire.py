"""The wire contract: each role's decoder admits its own messages and nothing else."""

from __future__ import annotations

import os

import msgspec
import pytest

from airlock import wire
from airlock.wire import (
    Done,
    Email,
    Hello,
    Malformed,
    Passed,
    Read,
    Reading,
    Rejected,
    Submit,
    Violation,
    encode,
    inbound_decoder,
    outbound_decoder,
)

OWN = [
    pytest.param("intake", Submit(ref=1, raw=b"x", format="text"), id="intake-submit"),
    pytest.param("reader", Reading(message_id="m", answer="4411", source="model"), id="reader-reading"),
    pytest.param("validator", Passed(message_id="m", value="4411"), id="validator-passed"),
    pytest.param("validator", Rejected(message_id="m", rule="r", reason="why"), id="validator-rejected"),
    pytest.param("actor", Done(message_id="m", outcome="completed"), id="actor-done"),
    pytest.param("actor", Hello(credit=3), id="actor-hello"),
]


@pytest.mark.parametrize(("role", "message"), OWN)
def test_each_role_decodes_its_own_messages(role: str, message: wire.Message) -> None:
    """A message a role may send round-trips through that role's decoder unchanged."""
    assert inbound_decoder(role)(encode(message)) == message


FOREIGN = [
    pytest.param("reader", Passed(message_id="m", value="4411"), id="reader-sends-passed"),
    pytest.param("reader", Done(message_id="m", outcome="completed"), id="reader-sends-done"),
    pytest.param("validator", Read(message_id="m", raw=b"x", format="text"), id="validator-sends-email"),
    pytest.param("actor", Passed(message_id="m", value="1"), id="actor-sends-passed"),
    pytest.param("intake", Passed(message_id="m", value="1"), id="intake-sends-passed"),
    pytest.param("intake", Reading(message_id="m", answer="1", source="model"), id="intake-sends-reading"),
]


@pytest.mark.parametrize(("role", "message"), FOREIGN)
def test_another_roles_message_is_a_violation(role: str, message: wire.Message) -> None:
    """A real message from the wrong endpoint is a Violation naming its kind, not a crash."""
    result = inbound_decoder(role)(encode(message))
    assert isinstance(result, Violation)
    assert result.kind == type(message).__struct_config__.tag


GARBAGE = [
    pytest.param(b"", id="empty"),
    pytest.param(b"\xc1", id="never-used-byte"),
    pytest.param(b"\x92\x01", id="truncated-array"),
    pytest.param(msgspec.msgpack.encode({"kind": "reading", "message_id": "m"}), id="missing-fields"),
    pytest.param(msgspec.msgpack.encode({"kind": "reading", "message_id": "m", "answer": "1",
                                         "source": "model", "extra": 1}), id="unknown-field"),
    pytest.param(msgspec.msgpack.encode({"kind": "reading", "message_id": 5, "answer": "1",
                                         "source": "model"}), id="wrong-type"),
    pytest.param(msgspec.msgpack.encode({"kind": "reading", "message_id": "m", "answer": "1",
                                         "source": "guessed"}), id="bad-literal"),
    pytest.param(msgspec.msgpack.encode({"kind": "nonsense"}), id="unknown-kind"),
    pytest.param(b"\x91" * 100_000 + b"\xc0", id="deep-nesting"),
    pytest.param(os.urandom(4096), id="random-bytes"),
]


@pytest.mark.parametrize("role", ["intake", "reader", "validator", "actor"])
@pytest.mark.parametrize("frame", GARBAGE)
def test_garbage_is_malformed_with_a_reason(role: str, frame: bytes) -> None:
    """Any frame that is not a message becomes Malformed with msgspec's reason."""
    result = inbound_decoder(role)(frame)
    assert isinstance(result, (Malformed, Violation)), result
    if isinstance(result, Malformed):
        assert result.reason and result.size == len(frame)


def test_a_submit_carries_an_email_flat_on_the_wire() -> None:
    """Submit.carrying puts each Email field on the submit map as is; .email gives it back."""
    email = Email(raw=b"Subject: hi\n\nx", format="eml", origin="smtp", sender="a@b.example", sender_proof="dkim")
    submit = Submit.carrying(7, email)
    assert submit.email == email
    assert msgspec.msgpack.decode(encode(submit)) == {
        "kind": "submit", "ref": 7, "raw": email.raw, "format": "eml", "origin": "smtp",
        "sender": "a@b.example", "sender_proof": "dkim"}


def test_a_read_is_still_tagged_email_and_never_carries_the_sender() -> None:
    """The broker->reader message keeps its tag and holds only the id, the raw bytes and the format."""
    assert msgspec.msgpack.decode(encode(Read(message_id="m", raw=b"x", format="text"))) == {
        "kind": "email", "message_id": "m", "raw": b"x", "format": "text"}


def test_malformed_reason_names_the_path() -> None:
    """The reason carries msgspec's error path, so a bad field is found fast."""
    frame = msgspec.msgpack.encode({"kind": "passed", "message_id": "m", "value": [1]})
    result = inbound_decoder("validator")(frame)
    assert isinstance(result, Malformed)
    assert "$.value" in result.reason


def test_bool_is_not_a_value_on_the_wire() -> None:
    """Passed.value is int | str; msgspec keeps True out of it."""
    frame = msgspec.msgpack.encode({"kind": "passed", "message_id": "m", "value": True})
    assert isinstance(outbound_decoder("actor")(frame), Malformed)


def test_messages_are_frozen() -> None:
    """Nobody edits a message in flight."""
    message = Passed(message_id="m", value="1")
    with pytest.raises(AttributeError):
        message.value = "2"  # type: ignore[misc]  # the assignment mypy refuses is the one under test


# --- batches: several messages in one frame


def test_one_message_goes_as_itself() -> None:
    """A lone message is its own frame, byte for byte what encode() gives."""
    message = Passed(message_id="m", value="4411")
    assert wire.frames([message]) == [(1, encode(message))]
    assert wire.frames([]) == []


def test_a_batch_round_trips_in_order() -> None:
    messages = [Reading(message_id=f"m{n}", answer=str(n), source="model") for n in range(40)]
    [(count, frame)] = wire.frames(messages)
    assert count == 40 and inbound_decoder("reader").frame(frame) == messages


def test_batches_are_capped_by_count_and_bytes() -> None:
    """No frame carries more than MAX_BATCH messages or (past its first) BATCH_BYTES."""
    many = [Hello(credit=1)] * (wire.MAX_BATCH * 2 + 5)
    assert [count for count, _ in wire.frames(many)] == [wire.MAX_BATCH, wire.MAX_BATCH, 5]
    big = [Submit(ref=n, raw=b"x" * (wire.BATCH_BYTES // 3), format="text") for n in range(7)]
    sent = wire.frames(big)
    assert sum(count for count, _ in sent) == 7 and all(len(frame) <= wire.BATCH_BYTES + 100 for _, frame in sent)
    decoded = [m for _, frame in sent for m in inbound_decoder("intake").frame(frame)]
    assert decoded == big


def test_each_message_of_a_batch_is_judged_alone() -> None:
    """A forbidden or broken message in a batch is its own Violation or Malformed; the
    rest of the batch still decodes."""
    good = Reading(message_id="m", answer="4411", source="model")
    forbidden = Done(message_id="m", outcome="completed")
    [(_, frame)] = wire.frames([good, forbidden, good])
    got = inbound_decoder("reader").frame(frame)
    assert got[0] == good and got[2] == good and isinstance(got[1], Violation) and "done" in got[1].reason
    broken = b"\x93" + encode(good) + b"\xc1" + encode(good)  # an array of three, one not msgpack
    got = inbound_decoder("reader").frame(broken)
    assert len(got) == 1 and isinstance(got[0], Malformed)  # not a batch at all: one Malformed
    wrong = b"\x92" + encode(good) + msgspec.msgpack.encode({"kind": "reading"})
    got = inbound_decoder("reader").frame(wrong)
    assert got[0] == good and isinstance(got[1], Malformed)


@pytest.mark.parametrize("frame", [
    pytest.param(b"\x90", id="empty-batch"),
    pytest.param(b"\xdc\x04\x01" + b"\x80" * 1025, id="over-max-batch"),
    pytest.param(b"\x91\x91" + encode(Hello(credit=1)), id="nested-batch"),
    pytest.param(b"\xdd\xff\xff\xff\xff", id="huge-declared-length"),
])
def test_bad_batches_are_malformed(frame: bytes) -> None:
    got = inbound_decoder("actor").frame(frame)
    assert got and all(isinstance(m, Malformed) for m in got), got


def test_a_batch_never_outgrows_the_receivers_frame_cap() -> None:
    """With a small AIRLOCK_MAX_FRAME_BYTES, batches stay under it (libzmq would drop the
    connection); a message bigger than the cap alone goes alone, as it did unbatched."""
    cap = 2_000
    messages = [Submit(ref=n, raw=b"x" * 300, format="text") for n in range(40)]
    sent = wire.frames(messages, cap)
    assert all(len(frame) <= cap - wire.FRAME_OVERHEAD_BYTES for _, frame in sent)
    assert sum(count for count, _ in sent) == 40
    assert [count for count, _ in wire.frames([Submit(ref=1, raw=b"x" * 5000, format="text")] * 2, cap)] == [1, 1]


def test_a_huge_declared_batch_costs_nothing() -> None:
    """4 MiB of one-byte elements under one array header: refused from the header, before
    any element is read (decoding first peaked at 236 MB, enough to kill the broker)."""
    import tracemalloc

    frame = b"\xdd" + (4_000_000).to_bytes(4, "big") + b"\xc0" * 4_000_000
    tracemalloc.start()
    try:
        (got,) = inbound_decoder("reader").frame(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(got, Malformed) and "1024" in got.reason
    assert peak < 1_000_000


def test_a_readings_grounding_is_optional_on_the_wire() -> None:
    """Reading.grounded has a default left off the wire: an older reader's frame
    still decodes, as "not checked" (None), and a checked one carries its finding."""
    decode = inbound_decoder("reader")
    plain = encode(Reading(message_id="m", answer="4411", source="model"))
    assert b"grounded" not in plain
    older = decode(plain)
    assert isinstance(older, Reading) and older.grounded is None
    for grounded in (True, False):
        out = decode(encode(Reading(message_id="m", answer="4411", source="model", grounded=grounded)))
        assert isinstance(out, Reading) and out.grounded is grounded
