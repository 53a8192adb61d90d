"""The charset rule: an email's text is read in the charset it declares, exactly, or refused.

A body whose bytes are not valid in its declared charset (US-ASCII where none is declared),
a header whose raw bytes are not UTF-8 (RFC 6532), or a shown header's encoded word whose
bytes are not valid in the charset it names (or that names no charset Python knows) is
`mail.charset`: nothing is decoded with U+FFFD in their place. The fast path and the full
parse agree on each case.
"""

from __future__ import annotations

import base64

import pytest

from reader import mail
from reader.mail import MailProblem, ParsedEmail

HEAD = b"From: Kunde <kunde@example.de>\nSubject: Bestellung\n"
ORDER_RU = "\u0417\u0430\u043a\u0430\u0437"  # "order", in Russian
ORDER_JA = "\u6ce8\u6587"  # and in Japanese


def eml(charset: str | None, body: bytes, cte: str = "8bit", head: bytes = HEAD) -> bytes:
    content_type = b"Content-Type: text/plain" + (f"; charset={charset}".encode() if charset else b"") + b"\n"
    return head + content_type + f"Content-Transfer-Encoding: {cte}\n\n".encode() + body


def multipart(part_head: bytes, part_body: bytes) -> bytes:
    return (HEAD + b'MIME-Version: 1.0\nContent-Type: multipart/alternative; boundary="b"\n\n'
            b"--b\n" + part_head + b"\n" + part_body + b"\n--b--\n")


def parsed(raw: bytes) -> ParsedEmail | MailProblem:
    """Both paths' result, after checking they are the same."""
    fast, full = mail.parse(raw, "eml"), mail.parse_full(raw)
    assert fast == full, (fast, full)
    return fast


READ = [
    pytest.param(eml("iso-8859-1", "Bestellung f\u00fcr 4411".encode("latin-1")), "f\u00fcr 4411", id="latin-1"),
    pytest.param(eml("koi8-r", f"{ORDER_RU} 4411".encode("koi8-r")), ORDER_RU,
                 id="koi8-r"),
    pytest.param(eml("windows-1252", "\u201eBestellung\u201c 4411 \u20ac".encode("cp1252")), "\u20ac",
                 id="windows-1252"),
    pytest.param(eml("shift_jis", f"{ORDER_JA} 4411".encode("shift_jis")), ORDER_JA, id="shift_jis"),
    pytest.param(eml("utf-8", "Bestellung f\u00fcr 4411".encode()), "f\u00fcr", id="utf-8"),
    pytest.param(eml("utf-8", base64.encodebytes("Zakaz \u0417 4411".encode()), "base64"), "\u0417", id="utf-8-base64"),
    pytest.param(eml(None, b"Order 4411"), "4411", id="ascii-undeclared"),
    pytest.param(eml("utf-8", b"Order 4411", head="From: M\u00fcller <m@x.de>\nSubject: \u6ce8\u6587\n".encode()),
                 "4411", id="utf-8-raw-headers"),
    pytest.param(eml("utf-8", b"Order 4411", head=b"Subject: =?iso-8859-1?q?f=FCr?= 4411\n"), "4411",
                 id="latin-1-encoded-word"),
    pytest.param(multipart(b"Content-Type: text/plain; charset=koi8-r\n", f"{ORDER_RU} 4411".encode("koi8-r")),
                 ORDER_RU, id="multipart-koi8-r"),
]


@pytest.mark.parametrize(("raw", "expect"), READ)
def test_text_valid_in_its_declared_charset_is_read(raw: bytes, expect: str) -> None:
    """Bytes valid in the charset they declare are read, in any charset, with no U+FFFD."""
    result = parsed(raw)
    assert isinstance(result, ParsedEmail), result
    assert expect in result.body + result.subject and "\ufffd" not in result.body + result.subject + result.sender


REFUSED = [
    pytest.param(eml("utf-8", b"Bestellung f\xfcr 4411"), id="utf-8-declared-latin-1-bytes"),
    pytest.param(eml("utf-8", base64.encodebytes(b"Order \xff 4411"), "base64"), id="utf-8-base64-invalid"),
    pytest.param(eml("utf-8", b"Order =FF 4411", "quoted-printable"), id="utf-8-qp-invalid"),
    pytest.param(eml("us-ascii", b"Order \xe9 4411"), id="us-ascii-8bit"),
    pytest.param(eml(None, b"Order \xe9 4411"), id="undeclared-8bit"),
    pytest.param(eml("shift_jis", b"Order \x81\x20 4411"), id="shift_jis-invalid"),
    pytest.param(eml("windows-1252", b"Order \x81 4411"), id="windows-1252-undefined-byte"),
    pytest.param(eml("utf-8", b"Order 4411", head=b"From: a@b.c\nSubject: Bestellung f\xfcr 4411\n"),
                 id="latin-1-raw-subject"),
    pytest.param(eml("utf-8", b"Order 4411", head=b"From: M\xfcller <m@x.de>\nSubject: Order\n"),
                 id="latin-1-raw-from"),
    pytest.param(eml("utf-8", b"Order 4411", head=HEAD + b"To: s\xe9rvice@shop.example\n"),
                 id="latin-1-raw-other-header"),
    pytest.param(eml("utf-8", b"Order 4411", head=b"Subject: =?utf-8?q?f=FCr?= 4411\n"), id="encoded-word-invalid"),
    pytest.param(eml("utf-8", b"Order 4411", head=b"Subject: =?x-unknown?q?f=FCr?= 4411\n"), id="encoded-word-unknown"),
    pytest.param(eml("utf-8", b"Order 4411", head=b"From: =?us-ascii?b?/w==?= <a@b.c>\n"), id="encoded-word-from"),
    pytest.param(multipart(b"Content-Type: text/plain; charset=utf-8\n", b"Order \xff 4411"),
                 id="multipart-part-invalid"),
    pytest.param(multipart(b"Content-Type: text/plain; charset=utf-8\nX-Note: \xff\n", b"Order 4411"),
                 id="multipart-part-header"),
    pytest.param(HEAD + b"Content-Type: text/html; charset=utf-8\n\n<p>Order \xff 4411</p>", id="html-invalid"),
]


@pytest.mark.parametrize("raw", REFUSED)
def test_bytes_invalid_in_their_charset_are_refused(raw: bytes) -> None:
    """Bytes a charset does not hold, in the body or a header, are mail.charset, never U+FFFD."""
    result = parsed(raw)
    assert isinstance(result, MailProblem) and result.rule == "mail.charset", result


def test_the_refusal_says_where_and_what() -> None:
    """The reason names the charset and the byte, so a sender can see what to fix."""
    body = parsed(eml("utf-8", b"Bestellung f\xfcr 4411"))
    header = parsed(eml("utf-8", b"Order 4411", head=b"Subject: f\xfcr\n"))
    assert isinstance(body, MailProblem) and "utf-8" in body.reason and "byte 12" in body.reason, body
    assert isinstance(header, MailProblem) and "Subject" in header.reason and "UTF-8" in header.reason, header
