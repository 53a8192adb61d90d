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

import email.message
import email.parser
import email.policy
from pathlib import Path

from hypothesis import given

from airlock import mailbounds
from reader import charset, mail
from reader.mail import MailProblem, ParsedEmail
from tests.fuzz.test_mail_fuzz import ALL_CHARSETS, FUZZ, emails

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted([*ROOT.glob("samples/*.eml"), *ROOT.glob("corpus/**/*.eml")])


def reference(raw: bytes) -> ParsedEmail | MailProblem:
    """reader.mail's own steps over a plain policy.default parse: no kept headers, no kept
    header classes, no kept parameter splits."""
    try:
        message = email.parser.BytesParser(policy=email.policy.default).parsebytes(raw)
        return (mail._header_bytes_problem(message)
                or mail._shown_problem(mail._raw(message, "from"), mail._raw(message, "subject"))
                or mail._charset_problem(message) or mail._checked(mail._from_message(message)))
    except mailbounds.TooComplex as exc:  # html_to_text's bounds are one of reader.mail's steps
        return mail.too_complex(exc.exceeded)
    except UnicodeDecodeError as exc:  # a body part's bytes, decoded strictly in its charset
        return MailProblem("mail.charset", charset.body_problem(exc))
    except LookupError as exc:
        return MailProblem("mail.charset", f"unknown charset: {exc}")
    except Exception as exc:  # noqa: BLE001  as reader.mail: the stdlib raises many things on hostile MIME
        return MailProblem("mail.broken", f"cannot parse MIME: {type(exc).__name__}: {exc}")


def near_a_bound(raw: bytes) -> bool:
    """An unbounded parse's own witness that the email is at (or within a small margin of)
    one of airlock.mailbounds' structural bounds: a refusal as too complex must have one.
    The margins absorb how each side counts folding and line ends, nothing more."""
    message = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(raw)

    def depth(part: email.message.Message) -> int:
        inner = part.get_payload() if part.is_multipart() else []
        return 1 + max((depth(p) for p in inner if isinstance(p, email.message.Message)), default=0)

    parts = list(message.walk())
    fields = [(name.lower(), str(value)) for part in parts for name, value in part.items()]
    parsed = [len(value) for name, value in fields if name in mailbounds.PARSED]
    return (len(parts) > mailbounds.MAX_PARTS - 5 or depth(message) >= mailbounds.MAX_DEPTH - 1
            or len(fields) > mailbounds.MAX_HEADER_FIELDS - 10
            or any(len(value) > mailbounds.MAX_HEADER_CHARS - 100 for _, value in fields)
            or sum(parsed) > mailbounds.MAX_PARSED_CHARS - 400)


def same(raw: bytes) -> None:
    fast, slow = mail.parse(raw, "eml"), reference(raw)
    if isinstance(fast, MailProblem) and fast.rule == "mail.too_complex" and slow != fast:
        # Past a bound there is nothing to compare (tests/integration/test_mail_bounds.py holds each
        # bound to its figure); the refusal must still have a witness, never be a guess.
        assert near_a_bound(raw), (fast, slow)
        return
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
