"""The reader's fast parse gives what the stdlib's policy.default parse gives.

reader.mail keeps each parsed header (per part, or per process for short structural ones),
makes each header class once and keeps each parameter split, because policy.default
re-parses a header on every read and builds a class for it each time: that cost 0.75 ms of
a 0.8 ms email. The reference below runs the same steps on a plain policy.default parse.
Both must agree on every email of the corpus and on every email hypothesis builds (the
fuzz strategies of test_mail_fuzz): the same body, subject, sender, attachments and
defects, or a problem under the same rule.

Both take the sender the way reader.mail._header does, on purpose: From is shown as text,
not re-rendered by policy.default's address parser (so a From that parser cannot read no
longer makes the whole email `mail.broken`; the sender is only ever displayed).
"""

from __future__ import annotations

import email.parser
import email.policy
from pathlib import Path

from hypothesis import given

from airlock import mailbounds
from reader import mail
from reader.mail import MailProblem, ParsedEmail
from tests.fuzz.test_mail_fuzz import ALL_CHARSETS, FUZZ, emails

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted([*ROOT.glob("samples/*.eml"), *ROOT.glob("corpus/**/*.eml")])


def reference(raw: bytes) -> ParsedEmail | MailProblem:
    """reader.mail's own steps over a plain policy.default parse: no kept headers, no kept
    header classes, no kept parameter splits."""
    try:
        message = email.parser.BytesParser(policy=email.policy.default).parsebytes(raw)
        return mail._charset_problem(message) or mail._checked(mail._from_message(message))
    except mailbounds.TooComplex as exc:  # html_to_text's bounds are one of reader.mail's steps
        return mail.too_complex(exc.exceeded)
    except LookupError as exc:
        return MailProblem("mail.charset", f"unknown charset: {exc}")
    except Exception as exc:
        return MailProblem("mail.broken", f"cannot parse MIME: {type(exc).__name__}: {exc}")


def same(raw: bytes) -> None:
    fast, slow = mail.parse(raw, "eml"), reference(raw)
    if isinstance(slow, MailProblem):
        assert isinstance(fast, MailProblem) and fast.rule == slow.rule, (fast, slow)
    else:
        assert fast == slow


def test_the_corpus_parses_the_same() -> None:
    assert len(CORPUS) > 150
    for path in CORPUS:
        assert mail.parse(path.read_bytes(), "eml") == reference(path.read_bytes()), path


@FUZZ
@given(emails(ALL_CHARSETS))
def test_random_mime_parses_the_same(raw: bytes) -> None:
    same(raw)
