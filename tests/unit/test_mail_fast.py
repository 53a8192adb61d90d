"""reader.simplemail, the fast path, gives exactly what the full parse gives, or says "not mine".

The fast path reads a simple one-part text email without the stdlib's MIME parser. Any
difference between it and the full parse (reader.mail.parse_full) would be a parser
differential, so every test here compares whole results, every field: on the corpus, on the
bench's sample, and on emails hypothesis builds both inside the fast path's grammar and just
outside it (folded headers, encoded words, odd charsets and transfer encodings, duplicate
headers, a missing From, mixed line ends, trailing blanks, bytes that are not ASCII, NULs,
emails at the bounds of airlock.mailbounds).
"""

from __future__ import annotations

import base64
import codecs
import quopri
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from airlock import mailbounds
from bench import SAMPLE
from reader import mail, simplemail
from reader.mail import MailProblem, ParsedEmail
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted([*ROOT.glob("samples/*.eml"), *ROOT.glob("corpus/**/*.eml")])
PROPERTY = settings(max_examples=examples(800), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def same(raw: bytes) -> ParsedEmail | MailProblem:
    """The fast parse, after checking that it is the full parse, field for field."""
    fast, full = mail.parse(raw, "eml"), mail.parse_full(raw)
    assert fast == full, (raw[:300], fast, full)
    return fast


def test_the_bench_sample_takes_the_fast_path() -> None:
    """The benchmark's email is read by the fast path (so its speed cannot silently go) and
    gives what the full parse gives."""
    raw = SAMPLE.read_bytes()
    assert simplemail.read(raw) is not None
    parsed = same(raw)
    assert isinstance(parsed, ParsedEmail) and "4411" in parsed.body


def test_the_corpus_parses_the_same_and_mostly_fast() -> None:
    """Every sample and corpus email gives the same result both ways; the simple ones (all
    but the multipart and HTML-with-attachment ones) take the fast path."""
    assert len(CORPUS) > 150
    taken = [path.name for path in CORPUS if simplemail.read(path.read_bytes()) is not None]
    for path in CORPUS:
        same(path.read_bytes())
    assert len(taken) >= 170, f"only {len(taken)} of {len(CORPUS)} corpus emails took the fast path"


HEAD = "From: Kunde <kunde@example.de>\nSubject: Bestellung\n"
BODY = "\nBestellung 4411 bitte.\n"


@pytest.mark.parametrize("raw", [
    pytest.param(HEAD + "Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n" + BODY,
                 id="plain"),
    pytest.param(HEAD.replace("\n", "\r\n") + BODY.replace("\n", "\r\n"), id="crlf"),
    pytest.param(HEAD + 'Content-Type: TEXT/Plain;\n\tCharset="ISO-8859-1"; format=flowed\n' + BODY, id="folded-type"),
    pytest.param("Subject: =?utf-8?q?Bestellung_4411?=\n" + BODY, id="encoded-word-no-from"),
    pytest.param(HEAD + "Content-Type: text/html; charset=utf-8\n\n<p>Order <b>4411</b></p>\n", id="html"),
    pytest.param(HEAD + "Content-Transfer-Encoding: base64\n\nT3JkZXIgNDQxMQ\n", id="base64-unpadded"),
    pytest.param(HEAD + "Received: from a\n by b\n\tvia c\nX-Note: \u00e9\n" + BODY, id="folded-unparsed"),
])
def test_simple_shapes_take_the_fast_path(raw: str) -> None:
    """Each of these plain shapes is the fast path's, with the full parse's result."""
    data = raw.encode()
    assert simplemail.read(data) is not None
    same(data)


@pytest.mark.parametrize("raw", [
    pytest.param("From nobody Mon Jan 1 00:00:00 2024\n" + HEAD + BODY, id="unix-from"),
    pytest.param(" folded first\n" + HEAD + BODY, id="first-line-continuation"),
    pytest.param(HEAD + "no colon here\n" + BODY, id="stray-line"),
    pytest.param(HEAD + ": no name\n" + BODY, id="empty-name"),
    pytest.param(HEAD + "Content-Type : text/plain\n" + BODY, id="space-before-colon"),
    pytest.param(HEAD + "X-\u00e9: 8-bit name\n" + BODY, id="8-bit-name"),
    pytest.param(HEAD + "Bestellung 4411 bitte.\n", id="no-separator"),
    pytest.param(HEAD, id="headers-only"),
    pytest.param(HEAD + "Content-Type: text/plain\nContent-Type: text/html\n" + BODY, id="two-types"),
    pytest.param(HEAD + "Content-Transfer-Encoding: 8bit\nContent-Transfer-Encoding: base64\n" + BODY, id="two-ctes"),
    pytest.param(HEAD + "Content-Disposition: attachment\n" + BODY, id="disposition"),
    pytest.param(HEAD + "Content-Type: text/plain; charset=x-klingon\n" + BODY, id="unknown-charset"),
    pytest.param(HEAD + "Content-Type: text/plain; charset=utf-7\n" + BODY, id="not-a-charset"),
    pytest.param(HEAD + "Content-Type: text/plain; charset*=utf-8''utf-8\n" + BODY, id="rfc2231"),
    pytest.param(HEAD + "Content-Type: text/plain; charset=utf-8 (comment)\n" + BODY, id="comment"),
    pytest.param(HEAD + "Content-Type: text/plain; name=a.txt\n" + BODY, id="other-param"),
    pytest.param(HEAD + "Content-Type: multipart/alternative; boundary=b\n" + BODY, id="multipart"),
    pytest.param(HEAD + "Content-Transfer-Encoding: base64 \n" + BODY, id="cte-trailing-blank"),
    pytest.param(HEAD + "Content-Transfer-Encoding:\n base64\n" + BODY, id="cte-folded"),
    pytest.param(HEAD + "Content-Transfer-Encoding: x-uuencode\n" + BODY, id="uuencode"),
    pytest.param(HEAD + "Subject: " + "x" * mailbounds.MAX_HEADER_CHARS + "\n" + BODY, id="subject-at-bound"),
    pytest.param(HEAD + "X: y\n" * mailbounds.MAX_HEADER_FIELDS + BODY, id="fields-at-bound"),
    pytest.param(HEAD + ("Subject: " + "s" * 4000 + "\n") * 5 + BODY, id="parsed-chars-at-bound"),
])
def test_near_misses_take_the_full_parse(raw: str) -> None:
    """Each of these is outside the fast path's grammar: it says "not mine", and the email
    gets the full parse's answer (a bound passed stays `mail.too_complex`)."""
    data = raw.encode()
    assert simplemail.read(data) is None
    same(data)


def test_a_bound_is_never_passed_by_the_fast_path() -> None:
    """An email past a bound of airlock.mailbounds is refused as too complex, as before."""
    for raw in (HEAD + "Subject: " + "x" * (mailbounds.MAX_HEADER_CHARS + 1) + "\n" + BODY,
                HEAD + "X: y\n" * (mailbounds.MAX_HEADER_FIELDS + 1) + BODY,
                HEAD + ("Subject: " + "s" * 4000 + "\n") * 5 + BODY):
        parsed = same(raw.encode())
        assert isinstance(parsed, MailProblem) and parsed.rule == "mail.too_complex"


def test_the_fast_charsets_are_character_sets() -> None:
    """Each charset the fast path decodes is a text codec Python knows, none that reader.mail
    refuses, so bytes.decode(charset, "replace") is all the full parse does with it too."""
    for charset in simplemail.CHARSETS:
        assert codecs.lookup(charset).name not in mail.NOT_CHARSETS
        assert isinstance(b"Order 4411 \xff".decode(charset, "replace"), str)


# --- generated emails, inside the fast path's grammar and just outside it

SIMPLE_TYPES = [
    "text/plain", "text/plain; charset=utf-8", 'text/plain; charset="UTF-8"', "TEXT/PLAIN; Charset=iso-8859-1",
    "text/html; charset=utf-8", "text/plain; charset=utf-8; format=flowed", "text/plain;charset=windows-1252",
    "text/plain;\tcharset=koi8-r; delsp=yes", "text/plain; charset=us-ascii ", "text/plain; charset=shift_jis",
    "text/plain; format=flowed", "text/html",
]
NEAR_TYPES = [
    "text/plain;", "text/plain; charset=", 'text/plain; charset=""', "text/plain; charset = utf-8",
    "text/plain ; charset=utf-8", "text/plain; charset=utf-8 (c)", "text/plain (c)", "text/plain; charset=x-klingon",
    "text/plain; charset=utf-7", "text/plain; charset=unicode-escape", "text/plain; charset=hex",
    "text/plain; charset*=utf-8''utf-8", "text/plain; charset*0=utf; charset*1=-8",
    "text/plain; charset=utf-8; charset=latin1", "text/plain; name=x.txt", "text/enriched", "text", "text/",
    "text/plain/x", "application/octet-stream", "message/rfc822", "multipart/alternative; boundary=b",
    "text/plain; charset='utf-8'", 'text/plain; charset="utf-8', "text/plain; charset=utf\u00e9", "text/plain\x00",
    "text/html; format=flowed; format=fixed", "text/plain; charset=utf-16", "", "=?utf-8?q?text/plain?=",
]
SIMPLE_CTES = ["7bit", "8bit", "binary", "quoted-printable", "base64", "BASE64", "Quoted-Printable"]
NEAR_CTES = ["base64 ", "base 64", "x-uuencode", "uuencode", "bogus", "", "8bit\t", "7bit (c)", '"base64"',
             "b\u00e4se64"]
SHOWN = [  # From and Subject values: plain, encoded, 8-bit, odd
    "Kunde <kunde@example.de>", "a@b.c", "", "  spaced  ", "=?utf-8?q?Luc=C3=ADa?= <l@x.es>", "Müller <m@x.de>",
    "a\x00b", "=?", "x =?bogus?q?a?= y", '"q" <a@b>', "Bestellung 4411", "=?utf-8?b?0JfQsNC60LDQtw==?= 3307",
    "\t tab", "trailing \t", "注文 4411", "=?utf-8?q?a?==?utf-8?q?b?=", "(comment) <a@b>",
]
OTHER = [("To", "support@shop.example"), ("Date", "Mon, 30 Nov 2026 09:00:00 +0000"), ("MIME-Version", "1.0"),
         ("Received", "from a by b"), ("X-\u00e9", "\u00e9"), ("Content-ID", "<a@b>"), ("X-Null", "a\x00b")]
WORDS = ["Bestellung 4411", "Order 4411", "é", "Заказ", "注文", "\x00", "=", "=3D", "=\n", "<b>x</b>", " ", "\t", "--"]
BROKEN_LINES = [b"From nobody Mon Jan 1 00:00:00 2024", b" continuation first", b"no colon here", b": no name",
                b"Content-Type : text/plain", b"X-\xff: 8-bit name"]


@st.composite
def header_value(draw: st.DrawFn, values: list[str]) -> bytes:
    one_line = st.text(max_size=20).filter(lambda t: "\r" not in t and "\n" not in t)
    value = draw(st.one_of(st.sampled_from(values), one_line))
    encoded = value.encode(draw(st.sampled_from(("utf-8", "utf-8", "latin-1"))), errors="replace")
    return encoded + draw(st.sampled_from((b"", b"", b" ", b"\t", b"\xff")))  # trailing blank or stray byte


@st.composite
def body(draw: st.DrawFn, charset: str, cte: str) -> bytes:
    text = " ".join(draw(st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=12)), max_size=8)))
    try:
        data = text.encode(charset.split("charset=")[-1].split(";")[0].strip('" \t') or "ascii")
    except (LookupError, ValueError):  # not a codec, or not one for this text
        data = text.encode("utf-8")
    data = data.replace(b"\n", draw(st.sampled_from((b"\n", b"\r\n", b"\r"))))
    lying = draw(st.integers(0, 5)) == 0
    if not lying and cte.strip().lower() == "base64":
        data = base64.encodebytes(data) if draw(st.booleans()) else base64.b64encode(data)
        data += draw(st.sampled_from((b"", b"", b"=", b"!", b"\x00")))
    elif not lying and cte.strip().lower() == "quoted-printable":
        data = quopri.encodestring(data) + draw(st.sampled_from((b"", b"=", b"=Z", b"=\n")))
    return data + draw(st.sampled_from((b"", b"\n", b"\x00", b"\xff\xfe", b"   ")))


@st.composite
def emails(draw: st.DrawFn) -> bytes:
    """One email, most near the fast path's grammar: each header line and the whole either
    plain or bent one way (folded, duplicated, broken, at a bound)."""
    fields: list[tuple[bytes, bytes]] = []
    for header in ("From", "Subject"):
        for _ in range(draw(st.sampled_from((0, 1, 1, 1, 2)))):  # missing, once, or twice
            fields.append((draw(st.sampled_from((header, header.upper(), header.lower()))).encode(),
                           draw(header_value(SHOWN))))
    types = draw(st.sampled_from((None, SIMPLE_TYPES, SIMPLE_TYPES, SIMPLE_TYPES, NEAR_TYPES)))
    content_type = None if types is None else draw(st.sampled_from(types))
    if content_type is not None:
        for _ in range(draw(st.sampled_from((1, 1, 1, 1, 1, 2)))):
            fields.append((b"Content-Type", content_type.encode()))
    ctes = draw(st.sampled_from((None, SIMPLE_CTES, SIMPLE_CTES, SIMPLE_CTES, NEAR_CTES)))
    cte = None if ctes is None else draw(st.sampled_from(ctes))
    if cte is not None:
        for _ in range(draw(st.sampled_from((1, 1, 1, 1, 1, 2)))):
            fields.append((b"Content-Transfer-Encoding", cte.encode()))
    if draw(st.integers(0, 14)) == 0:
        fields.append((b"Content-Disposition", draw(st.sampled_from((b"inline", b"attachment; filename=a.txt")))))
    fields += [(name.encode(), value.encode()) for name, value in draw(st.lists(st.sampled_from(OTHER), max_size=3))]
    fields = draw(st.permutations(fields))
    lines: list[bytes] = []
    for name, value in fields:
        line = name + b":" + draw(st.sampled_from((b" ", b" ", b"", b"  ", b"\t"))) + value
        if draw(st.integers(0, 6)) == 0:  # folded somewhere after the colon
            at = draw(st.integers(len(name) + 1, len(line)))
            line = line[:at] + b"\n" + draw(st.sampled_from((b" ", b"\t", b"  "))) + line[at:]
        lines.append(line)
    match draw(st.sampled_from(["none"] * 15 + ["fields", "subject", "parsed"])):  # at a bound, or just inside it
        case "fields":
            bulk = [b"X: y"] * (mailbounds.MAX_HEADER_FIELDS - len(lines) + draw(st.integers(-2, 2)))
        case "subject":
            bulk = [b"Subject: " + b"s" * (mailbounds.MAX_HEADER_CHARS + draw(st.integers(-2, 2)))]
        case "parsed":
            bulk = [b"Subject: " + b"s" * 4000] * 4 + [b"Subject: " + b"s" * draw(st.integers(300, 400))]
        case _:
            bulk = []
    at = draw(st.integers(0, len(lines)))
    lines[at:at] = bulk
    if draw(st.integers(0, 14)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(BROKEN_LINES)))
    separator = [b""] if draw(st.integers(0, 19)) else []  # the empty line, or (sometimes) none
    text = body(content_type or "", cte or "")
    chunks = [*lines, *separator]
    # One line end for the whole email, as most mailers write, or a mix taken in turn.
    ends = draw(st.lists(st.sampled_from((b"\n", b"\r\n", b"\r")), min_size=1, max_size=3))
    head = b"".join(chunk.replace(b"\n", ends[i % len(ends)]) + ends[i % len(ends)] for i, chunk in enumerate(chunks))
    return head + draw(text)


@PROPERTY
@given(emails())
def test_generated_emails_parse_the_same(raw: bytes) -> None:
    """Whether or not the fast path takes an email, the result is the full parse's."""
    event("fast path" if simplemail.read(raw) is not None else "full parse")
    same(raw)


shown_raw = st.lists(st.one_of(
    st.binary(max_size=8), st.text(max_size=8).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"=?", b"?=", b"=?utf-8?q?a?=", b"=?utf-8?b?w6k=?=", b"\r\n ", b"\n\t", b"\r", b" ", b"\t",
                     b"\x00", "é".encode(), b"\xff", b"\xc3", b"\x0b", b"\x85"]),
), max_size=10).map(b"".join).map(lambda data: data.decode("ascii", "surrogateescape"))


@PROPERTY
@given(shown_raw)
def test_a_header_is_shown_as_the_header_parser_shows_it(raw: str) -> None:
    """reader.mail's shortcut for a header without encoded words gives the unstructured
    header parser's text, for any raw value (surrogates stand for bytes that are not ASCII)."""
    assert mail._shown("Subject", raw) == str(mail._AS_TEXT.header_fetch_parse("Subject", raw))
