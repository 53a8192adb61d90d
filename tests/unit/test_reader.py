"""The reader's handle(): parse, prompt, ask, fall back to recordings, never invent."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path
from typing import Literal

import pytest

from airlock import task as task_module
from airlock.wire import EmailFormat, Read, Reading, Unreadable
from reader import prompt, recordings
from reader.app import MAX_ANSWER_CHARS, Ask, Reader
from reader.mail import ParsedEmail, parse
from reader.model import ModelAnswer, ModelFailure

ROOT = Path(__file__).resolve().parents[2]
TASK = task_module.load(ROOT / "tasks" / "order_status.toml")
SEED = (ROOT / "samples" / "seed_4411_de.eml").read_bytes()
# The ways a model fails that these tests try (mypy checks each is one of ModelFailure's kinds).
FailureKind = Literal["refused", "timeout", "http_error", "bad_body", "not_configured"]


def answering(text: str) -> Ask:
    return lambda messages: ModelAnswer(text=text, ms=1.0)


def failing(kind: FailureKind = "refused") -> Ask:
    return lambda messages: ModelFailure(kind, "test")


def noting(asked: list[prompt.ChatMessages]) -> Ask:
    """A model that answers "1" and keeps each prompt it was asked in `asked`."""
    def ask(messages: prompt.ChatMessages) -> ModelAnswer:
        asked.append(messages)
        return ModelAnswer("1", 1.0)
    return ask


def read(reader: Reader, raw: bytes, fmt: EmailFormat = "eml") -> Reading | Unreadable:
    (out,) = reader.handle(Read(message_id="m", raw=raw, format=fmt))
    assert isinstance(out, Reading | Unreadable)
    return out


@pytest.mark.parametrize(("answer", "expected", "grounded"), [
    ("4411", "4411", True), ("  4411\n", "4411", True), ("\t4411 bitte \r\n", "4411 bitte", True),
    ("\u00a04411", "\u00a04411", False),  # only ASCII whitespace is stripped: NBSP stays for the validator
])
def test_model_answer_is_returned_raw_but_trimmed(answer: str, expected: str, grounded: bool) -> None:
    """The reader strips surrounding ASCII whitespace and changes nothing else; it says
    whether the trimmed answer is in the email ("Bestellung 4411 bitte."), the NBSP one is not."""
    out = read(Reader(TASK, answering(answer), {}), SEED)
    assert out == Reading(message_id="m", answer=expected, source="model", notes=out.notes, grounded=grounded)


def test_prompt_has_instruction_examples_and_email() -> None:
    """The model sees the task's instruction, its few-shot examples, then the email."""
    seen: list[prompt.ChatMessages] = []
    Reader(TASK, noting(seen), {}).handle(
        Read(message_id="m", raw=SEED, format="eml"))
    (messages,) = seen
    assert messages[0] == {"role": "system", "content": TASK.reader.instruction}
    assert len(messages) == 2 + 2 * len(TASK.reader.examples)
    assert "Bestellung 4411" in messages[-1]["content"] and messages[-1]["role"] == "user"


@pytest.mark.parametrize("kind", ["refused", "timeout", "http_error", "bad_body", "not_configured"])
def test_dead_model_falls_back_to_the_recording(kind: FailureKind) -> None:
    """When no model answers, the recorded answer is used and marked source=recorded."""
    reader = Reader(TASK, failing(kind), recordings.load(TASK.recordings_path))
    out = read(reader, SEED)
    assert isinstance(out, Reading) and (out.answer, out.source) == ("4411", "recorded")
    error = out.notes["model_error"]
    assert isinstance(error, str) and error.startswith(kind)


def test_no_recording_means_no_answer() -> None:
    """Without a recording the reader says source=none and answers nothing: it never guesses."""
    out = read(Reader(TASK, failing(), {}), SEED)
    assert isinstance(out, Reading) and (out.answer, out.source) == ("", "none")


def test_every_shipped_sample_has_a_recording() -> None:
    """Each sample email has a recorded real answer for the order task."""
    recorded = recordings.load(TASK.recordings_path)
    for path in sorted((ROOT / "samples").glob("*.eml")):
        parsed = parse(path.read_bytes(), "eml")
        assert isinstance(parsed, ParsedEmail), path.name
        key = prompt.digest(prompt.for_email(TASK.reader, parsed)[0])
        assert key in recorded, f"{path.name} has no recording (run airlock record)"


def test_huge_answer_is_cut_and_flagged() -> None:
    """A model answer of any length is bounded; the cut is flagged for the validator."""
    out = read(Reader(TASK, answering("9" * 1_000_000), {}), SEED)
    assert isinstance(out, Reading) and out.truncated and len(out.answer) == MAX_ANSWER_CHARS


def _eml(body: str | bytes, charset: str = "utf-8", subtype: str = "plain") -> bytes:
    message = EmailMessage()
    message["From"] = "a@example.com"
    message["Subject"] = "s"
    if isinstance(body, bytes):
        message.set_content(body, maintype="text", subtype=subtype, cte="base64")
        message.replace_header("Content-Type", f"text/{subtype}; charset={charset}")
    else:
        message.set_content(body, subtype=subtype, charset=charset)
    return bytes(message)


BAD = [
    pytest.param(b"", "eml", "mail.empty_body", id="empty-eml"),
    pytest.param(b"Subject: hi\n\n   \n", "eml", "mail.empty_body", id="blank-body"),
    pytest.param(b"\xff\xfe\xfa not utf-8", "text", "mail.charset", id="text-not-utf8"),
    pytest.param(_eml(b"Bestellung 4411", charset="x-klingon"), "eml", "mail.charset", id="unknown-charset"),
    pytest.param(b"Content-Type: multipart/mixed; boundary=zz\n\n--zz\nContent-Type: text/plain\n\n",
                 "eml", "mail.empty_body", id="broken-multipart"),
]


@pytest.mark.parametrize(("raw", "fmt", "rule"), BAD)
def test_bad_emails_are_unreadable_with_a_rule(raw: bytes, fmt: EmailFormat, rule: str) -> None:
    """Broken or empty emails give a typed Unreadable, and the model is never asked."""
    asked: list[prompt.ChatMessages] = []
    out = read(Reader(TASK, noting(asked), {}), raw, fmt)
    assert isinstance(out, Unreadable) and out.rule == rule and out.reason
    assert asked == []


@pytest.mark.parametrize(("raw", "needle"), [
    pytest.param(_eml("Заказ 3307".encode("koi8-r"), charset="koi8-r"), "Заказ 3307", id="koi8-r"),
    pytest.param(_eml("Größe 4411".encode("latin-1"), charset="iso-8859-1"), "Größe 4411", id="latin-1"),
    pytest.param(_eml("<p>Order <b>4411</b></p><script>alert(1)</script>", subtype="html"), "Order 4411", id="html"),
])
def test_non_utf8_and_html_bodies_are_decoded(raw: bytes, needle: str) -> None:
    """Declared charsets are honoured and HTML is reduced to its text."""
    seen: list[prompt.ChatMessages] = []
    read(Reader(TASK, noting(seen), {}), raw)
    assert needle in seen[0][-1]["content"] and "alert" not in seen[0][-1]["content"]


def test_long_email_is_cut_for_the_prompt_and_noted() -> None:
    """A long body reaches the model cut to the prompt limit; the trace notes say so."""
    out = read(Reader(TASK, answering("1"), {}), ("Order 4411 " * 5000).encode(), "text")
    assert out.notes["prompt_cut"] is True and out.notes["body_chars"] == 55000


def test_odd_unicode_passes_through_untouched() -> None:
    """Bidi controls and zero-width characters reach the model as they are; the validator judges."""
    seen: list[prompt.ChatMessages] = []
    read(Reader(TASK, noting(seen), {}), "44\u200b11 \u202e".encode(), "text")
    assert "44\u200b11 \u202e" in seen[0][-1]["content"]


def test_shared_header_cache_stays_small_under_hostile_variety() -> None:
    """A thousand emails, each with its own worst-case short Content-Type: what the reader
    keeps between emails stays within a few megabytes (the parse trees are large)."""
    import tracemalloc

    from reader import mail

    shapes = ["a/b; c={}x@y.x@y.x@y.x@y.x@y.x@y.x@y.x@y.x@y.x@", 'a/b; c="{} y x y x y x y x y x y x y x y x y x y x y',
              "a/b; c*0*=utf-8''{}%41%41%41%41%41%41%41%41%41%41%41; d=1"]
    mail._COMMON.clear()
    tracemalloc.start()
    try:
        # Four times what the cache may hold: it fills and is cleared again and again (an
        # unbounded cache fails the entries check; what one full cache keeps, the bytes check).
        for n in range(4 * mail._COMMON_MAX):
            value = shapes[n % 3].format(n)[:64]
            mail.parse(f"Content-Type: {value}\n\nOrder 4411\n".encode(), "eml")
        kept, entries = tracemalloc.get_traced_memory()[0], len(mail._COMMON)
    finally:
        tracemalloc.stop()
        mail._COMMON.clear()
    assert entries <= mail._COMMON_MAX and kept < 16_000_000, (entries, kept)


@pytest.mark.parametrize(("answer", "grounded"), [
    pytest.param("4411", True, id="in-the-body"),
    pytest.param("60418", False, id="an-example-copied"),  # the task's own example, not this email's
    pytest.param("441", False, id="part-of-a-number"),
    pytest.param("Bestellung", True, id="a-word-is-a-token-too"),  # the validator judges its type
])
def test_the_reader_says_whether_the_answer_is_in_the_email(answer: str, grounded: bool) -> None:
    """The reader's code, not the model, checks the answer against the email it read."""
    out = read(Reader(TASK, answering(answer), {}), SEED)
    assert isinstance(out, Reading) and out.grounded is grounded


def test_a_number_only_in_the_subject_is_grounded_and_the_label_is_not() -> None:
    """The Subject is part of what the model read; the reader's "Subject:" label is not."""
    raw = b"From: a@example.com\nSubject: Order 7788\n\nWhere is it?\n"
    found = [read(Reader(TASK, answering(answer), {}), raw) for answer in ("7788", "Subject")]
    assert [out.grounded if isinstance(out, Reading) else out for out in found] == [True, False]


def test_no_answer_is_not_checked() -> None:
    """With no model and no recording there is nothing to look for: grounded stays None."""
    out = read(Reader(TASK, failing(), {}), b"From: a@example.com\nSubject: x\n\nOrder 5\n")
    assert isinstance(out, Reading) and out.answer == "" and out.grounded is None
