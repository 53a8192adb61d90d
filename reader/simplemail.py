"""The fast path of reader.mail.parse: one text part, read without the stdlib's MIME parser.

Most mail the reader sees is a single text/plain part, and the full parse (airlock.mailbounds'
BoundedFeedParser over policy.default, then reader.mail's steps) spent about 90 µs on it,
mostly building header objects nobody shows. read() takes such an email apart with two
regular expressions and the very stdlib steps the full parse ends in (the same body decoders,
the same header-value assembly), and answers None, "not mine", for anything it is not sure
of: reader.mail then runs the full parse. A fast path that guessed would be a parser
differential, which is a security bug, so the test of this module is that reader.mail.parse
gives exactly what the full parse gives, on the corpus and on emails hypothesis builds to
sit just inside and just outside this module's grammar (tests/unit/test_mail_fast.py).

What read() takes, and why each is exact:
- A header block of `Name:value` lines (Name printable ASCII without ":", as FeedParser's
  headerRE), each followed by its continuation lines (a space or tab first), ended by an
  empty line, with lines ending in CRLF, CR or LF as FeedParser splits them. No unix "From "
  line, no stray line, no header-less separator: FeedParser would note a defect for each.
- Bounds: fewer header fields than MAX_HEADER_FIELDS, each parsed header (mailbounds.PARSED)
  shorter than MAX_HEADER_CHARS and all of them together shorter than MAX_PARSED_CHARS, so
  BoundedFeedParser would pass the email (one part, no depth), and nothing else is parsed.
- At most one Content-Type, text/plain or text/html (or none: text/plain), with at most a
  charset from CHARSETS and format/delsp parameters, written plainly; at most one
  Content-Transfer-Encoding, exactly one of CTES; no Content-Disposition.
The body is then what Message.get_payload(decode=True) and get_text_content make of it:
quopri for quoted-printable, email._encoded_words.decode_b (and its defects) for base64, the
bytes as they are otherwise, decoded with bytes.decode(charset) strictly. Bytes not valid in
their charset, in the body or (as UTF-8) in the headers, are the full parse's to refuse
(reader.charset), so read() answers None for them. From and Subject
may hold any text: they are returned raw, for reader.mail to show as the full parse does.
These are CPython 3.11's steps; a Python whose email package reads differently fails the
tests that hold the two paths equal rather than drifting from them.
"""

from __future__ import annotations

import quopri
import re
from email._encoded_words import decode_b  # type: ignore[import-not-found]  # get_payload's base64 decoder; private, no stub

import msgspec

from airlock import mailbounds


class Simple(msgspec.Struct, frozen=True):
    """One text part's decoded body and its two shown headers' raw values (None: absent)."""

    body: str
    subtype: str  # "plain" or "html"
    sender_raw: str | None
    subject_raw: str | None
    defects: list[str]


# Charsets whose decoding is plainly bytes.decode(name, "replace") in both paths: real
# character sets Python knows, none of reader.mail.NOT_CHARSETS.
CHARSETS = frozenset({
    "us-ascii", "ascii", "utf-8", "utf8", "iso-8859-1", "iso-8859-2", "iso-8859-3", "iso-8859-4",
    "iso-8859-5", "iso-8859-6", "iso-8859-7", "iso-8859-8", "iso-8859-9", "iso-8859-10",
    "iso-8859-13", "iso-8859-14", "iso-8859-15", "iso-8859-16", "windows-1250", "windows-1251",
    "windows-1252", "windows-1253", "windows-1254", "windows-1255", "windows-1256", "windows-1257",
    "windows-1258", "koi8-r", "koi8-u", "shift_jis", "euc-jp", "iso-2022-jp", "gb2312", "gbk",
    "gb18030", "big5", "euc-kr",
})
CTES = frozenset({"7bit", "8bit", "binary", "quoted-printable", "base64"})

_NL = rb"(?>\r\n|\r|\n)"  # atomic: a CRLF is never taken as a CR ending one line and an LF another
_FIELD = rb"[\x21-\x39\x3b-\x7e]++:[^\r\n]*+" + _NL + rb"(?:[ \t][^\r\n]*+" + _NL + rb")*+"
_HEAD = re.compile(rb"(?:" + _FIELD + rb")*+" + _NL)  # possessive throughout: linear, one reading
_FIELDS = re.compile(r"([\x21-\x39\x3b-\x7e]++):([^\r\n]*+(?>\r\n|\r|\n)(?:[ \t][^\r\n]*+(?>\r\n|\r|\n))*+)",
                     re.ASCII)
_TOKEN = r"[A-Za-z0-9_.:-]+"
# re.ASCII: case-insensitive Unicode matching would let U+017F (a long s) be an "s".
_PARAM = r";[ \t]*((?i:charset|format|delsp))=(?:\"(" + _TOKEN + r")\"|(" + _TOKEN + r"))[ \t]*"  # name, quoted, bare
_PARAMS = re.compile(_PARAM, re.ASCII)
# One grammar for both: the parameters _content_type reads are the ones this admits.
_CONTENT_TYPE = re.compile(r"(?i:text/(plain|html))[ \t]*((?:" + _PARAM + r")*)", re.ASCII)


def read(raw: bytes) -> Simple | None:
    """A Simple for an email this module reads exactly as the full parse does, else None."""
    head_match = _HEAD.match(raw)
    if head_match is None:
        return None
    head = raw[:head_match.end()]
    if not head.isascii() and not _is_utf8(head):
        return None  # header bytes that are not UTF-8: the full parse refuses them (reader.charset)
    fields = _FIELDS.findall(head.decode("ascii", "surrogateescape"))
    if len(fields) >= mailbounds.MAX_HEADER_FIELDS:
        return None
    parsed_chars = 0
    found: dict[str, str] = {}
    for name, rest in fields:
        key = name.lower()
        if key in mailbounds.PARSED:  # the others are only counted, by the full parse too
            # policy.default's header_source_parse: the first line's value without leading
            # blanks, its continuation lines as they are, the last line end dropped.
            value = rest.lstrip(" \t").rstrip("\r\n")
            if len(value) >= mailbounds.MAX_HEADER_CHARS:
                return None
            parsed_chars += len(value)
            if key in found and key != "from" and key != "subject":
                return None  # a second Content-*: which one a reader sees is where parsers differ
            found.setdefault(key, value)  # the first From and Subject are the ones shown
    if parsed_chars >= mailbounds.MAX_PARSED_CHARS:
        return None
    if "content-disposition" in found:
        return None
    subtype, charset = "plain", "ASCII"  # Message.get_param's default as get_text_content asks
    if "content-type" in found:
        typed = _content_type(unfolded(found["content-type"]))
        if typed is None:
            return None
        subtype, charset = typed
    cte = unfolded(found.get("content-transfer-encoding", "7bit"))
    cte = cte.lower() if cte.isascii() else ""  # (str.lower maps the Kelvin sign to "k")
    if cte not in CTES:
        return None
    payload = raw[head_match.end():]
    defects: list[str] = []
    if cte == "quoted-printable":
        payload = quopri.decodestring(payload)
    elif cte == "base64":
        payload, found_defects = decode_b(b"".join(payload.splitlines()))
        defects = [type(defect).__name__ for defect in found_defects]
    try:
        text = payload.decode(charset)
    except UnicodeDecodeError:
        return None  # not valid in its charset: the full parse says so (reader.charset)
    return Simple(body=text, subtype=subtype, sender_raw=found.get("from"),
                  subject_raw=found.get("subject"), defects=defects)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def unfolded(value: str) -> str:
    """A raw header value without its CRs and LFs, as policy.default's header_fetch_parse
    reads it (its re.split is slower, and most values hold neither)."""
    if "\n" in value or "\r" in value:
        return value.replace("\r", "").replace("\n", "")
    return value


def _content_type(value: str) -> tuple[str, str] | None:
    """(subtype, charset) of a plainly written text/plain or text/html value, else None."""
    match = _CONTENT_TYPE.fullmatch(value)
    if match is None:
        return None
    charset = "ASCII"
    seen = set()
    for written, quoted, bare in _PARAMS.findall(match.group(2)):
        name, param = written.lower(), quoted or bare  # the name as Message._parseparam reads it
        if name in seen:
            return None
        seen.add(name)
        if name == "charset":
            if param.lower() not in CHARSETS:
                return None
            charset = param
    return match.group(1).lower(), charset
