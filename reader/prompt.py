"""The few-shot prompt the reader sends, and the digest that keys recorded answers."""

from __future__ import annotations

import hashlib

import msgspec

from airlock.task import ReaderSpec
from reader.mail import ParsedEmail

MAX_EMAIL_CHARS = 4000  # the small model's context is short; the rest is cut and the trace says so

ChatMessages = list[dict[str, str]]


SUBJECT_LABEL = "Subject: "  # the reader's label, not the email's text: grounding skips it


def email_text(parsed: ParsedEmail) -> tuple[str, bool]:
    """What the model reads of the email, and whether it was cut."""
    text = f"{SUBJECT_LABEL}{parsed.subject}\n\n{parsed.body}" if parsed.subject else parsed.body
    # Mail over SMTP ends lines in CRLF, files in LF: one email must make one prompt (and
    # so find its recorded answer) however it arrived.
    text = text.replace("\r\n", "\n")
    return text[:MAX_EMAIL_CHARS], len(text) > MAX_EMAIL_CHARS


def for_email(spec: ReaderSpec, parsed: ParsedEmail) -> tuple[ChatMessages, bool]:
    """The prompt for one parsed email, and whether its text was cut: the reader asks it,
    `airlock record` records an answer for it, so both must build it the same way."""
    text, cut = email_text(parsed)
    return build(spec, text), cut


def build(spec: ReaderSpec, text: str) -> ChatMessages:
    messages = [{"role": "system", "content": spec.instruction}]
    for example in spec.examples:
        messages.append({"role": "user", "content": example.email})
        messages.append({"role": "assistant", "content": example.answer})
    messages.append({"role": "user", "content": text})
    return messages


def digest(messages: ChatMessages) -> str:
    """sha256 of the exact prompt, email included: a recording answers only that prompt."""
    return hashlib.sha256(msgspec.json.encode(messages)).hexdigest()
