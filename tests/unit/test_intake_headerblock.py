"""intake/headerblock.py: a header block both parsers split alike, within the bounds, or why not."""

from __future__ import annotations

import pytest

from intake import headerblock
from intake.headerblock import Block, NotProvable
from reader import mail

HEAD = b"From: a@example.org\r\nTo: b@example.org\r\nSubject: order\r\n"
BODY = b"\r\nWhere is my order 772?\r\n"


@pytest.mark.parametrize("raw", [
    pytest.param(HEAD + BODY, id="crlf"),
    pytest.param((HEAD + BODY).replace(b"\r\n", b"\n"), id="lf-as-a-file-holds-it"),
    pytest.param(HEAD.replace(b"Subject: order", b"Subject: order\r\n\tfolded") + BODY, id="folded"),
    pytest.param(HEAD + b"X-Empty:\r\n" + BODY, id="empty-value"),
    pytest.param(HEAD + b"\r\nbody with a bare\rCR and a lone\nLF\r\n", id="stray-line-ends-in-the-body"),
])
def test_plain_blocks_are_read_field_by_field(raw: bytes) -> None:
    """Plainly written blocks give their fields, top to bottom, as the reader sees them."""
    block = headerblock.read(raw)
    assert isinstance(block, Block), block
    assert [name for name, _ in block.fields][:3] == ["from", "to", "subject"]
    parsed = mail.parse(raw, "eml")
    assert isinstance(parsed, mail.ParsedEmail)
    assert parsed.subject.startswith("order")


@pytest.mark.parametrize(("raw", "said"), [
    pytest.param(b"X-Note: hi\rSubject: 4411\r\n" + HEAD + BODY, "bare CR", id="bare-cr"),
    pytest.param(b"X-Note: hi\nSubject: 4411\r\n" + HEAD + BODY, "lone LF", id="lone-lf"),
    pytest.param((HEAD + BODY).replace(b"\r\n", b"\n").replace(b"To:", b"X: a\rTo:"), "bare CR", id="cr-in-lf-block"),
    pytest.param(b"X-Note : hi\r\n" + HEAD + BODY, "neither a field", id="space-before-colon"),
    pytest.param(b"From mallory Mon Jan 1\r\n" + HEAD + BODY, "neither a field", id="mbox-from-line"),
    pytest.param(b" continued\r\n" + HEAD + BODY, "neither a field", id="continuation-first"),
    pytest.param(b"Subject: 4411\r\n" + HEAD + BODY, "2 'subject' headers", id="two-subjects"),
    pytest.param(b"Content-Type: text/html\r\nContent-type: text/plain\r\n" + HEAD + BODY, "2 'content-type'",
                 id="two-content-types-in-two-cases"),
    pytest.param(b"DKIM-Signature: v=1\r\n" * 5 + HEAD + BODY, "5 DKIM-Signature fields", id="five-signatures"),
    pytest.param(b"DKIM-Signature: v=1; h=" + b":".join(b"x%d" % i for i in range(101)) + b"\r\n" + HEAD + BODY,
                 "naming 101 header fields", id="101-names"),
    pytest.param(b"X: v\r\n" * 2_001 + HEAD + BODY, "header fields", id="too-many-fields"),
    pytest.param(b"X: v\r\n" + b" more\r\n" * 4_001 + HEAD + BODY, "header lines", id="too-many-lines"),
    pytest.param(BODY, "no header block", id="no-headers"),
])
def test_blocks_that_parsers_split_apart_or_past_a_bound_prove_nothing(raw: bytes, said: str) -> None:
    """Each rule gives a NotProvable whose reason names it."""
    found = headerblock.read(raw)
    assert isinstance(found, NotProvable) and said in found.reason, found


def test_a_header_the_reader_reads_must_be_among_the_signed_names() -> None:
    """unsigned() names the first such header the email carries that an h= leaves out."""
    block = headerblock.read(HEAD + b"Content-Type: text/plain\r\nX-Mailer: x\r\n" + BODY)
    assert isinstance(block, Block)
    assert headerblock.unsigned(block, frozenset({"from", "to", "subject", "content-type"})) is None
    assert headerblock.unsigned(block, frozenset({"from", "to", "subject"})) == "content-type"
