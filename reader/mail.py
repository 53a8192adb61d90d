"""Untrusted bytes -> sender, subject and body text, or a typed reason why not.

Parsing happens here, in the reader, because the reader is the one process built to hold
hostile text. Nothing here guesses: an unknown charset, an empty body, or text whose bytes
are not valid in the charset it declares (reader.charset's rule) is a MailProblem.
An email that would cost the stdlib's parsers more than airlock.mailbounds allows (parts,
nesting, header fields, header characters; an HTML body's unclosed markup and attribute
count) is `mail.too_complex`, refused before that parser does the work.

A simple email (one text part, plainly written headers) is read by reader.simplemail
without the stdlib's parser, about five times faster; anything else, and anything that
module is not sure of, takes the full parse (parse_full), whose result the fast path equals.
"""

from __future__ import annotations

import codecs
import email.headerregistry
import email.policy
import re
from email.message import EmailMessage
from html.parser import HTMLParser

import msgspec

from airlock import mailbounds
from reader import charset, simplemail
from reader.charset import NOT_CHARSETS


class ParsedEmail(msgspec.Struct, frozen=True):
    sender: str
    subject: str
    body: str
    attachments: list[str] = []
    defects: list[str] = []


class MailProblem(msgspec.Struct, frozen=True):
    rule: str
    reason: str


def parse(raw: bytes, fmt: str) -> ParsedEmail | MailProblem:
    if fmt == "text":
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return MailProblem("mail.charset", f"text is not valid UTF-8: {exc.reason} at byte {exc.start}")
        return _checked(ParsedEmail(sender="", subject="", body=body))
    return _parse_eml(raw, fast=True)


def parse_full(raw: bytes) -> ParsedEmail | MailProblem:
    """parse(raw, "eml") without reader.simplemail's fast path: what that path must give."""
    return _parse_eml(raw, fast=False)


def _parse_eml(raw: bytes, fast: bool) -> ParsedEmail | MailProblem:
    try:
        simple = simplemail.read(raw) if fast else None
        if simple is not None:
            return _shown_problem(simple.sender_raw, simple.subject_raw) or _checked(_from_simple(simple))
        message = mailbounds.parse(raw, _POLICY, _Part)
        if isinstance(message, mailbounds.Exceeded):
            return too_complex(message)
        return (_header_bytes_problem(message) or _shown_problem(_raw(message, "from"), _raw(message, "subject"))
                or _charset_problem(message) or _checked(_from_message(message)))
    except mailbounds.TooComplex as exc:
        return too_complex(exc.exceeded)
    except UnicodeDecodeError as exc:  # a body part's bytes, decoded strictly in its charset
        return MailProblem("mail.charset", charset.body_problem(exc))
    except LookupError as exc:
        return MailProblem("mail.charset", f"unknown charset: {exc}")
    except Exception as exc:  # noqa: BLE001  the stdlib parser can raise many things on hostile MIME
        return MailProblem("mail.broken", f"cannot parse MIME: {type(exc).__name__}: {exc}")


def too_complex(exceeded: mailbounds.Exceeded) -> MailProblem:
    return MailProblem("mail.too_complex", f"the email is too complex to parse safely: {exceeded.reason()}")


class _Part(EmailMessage):
    """policy.default's EmailMessage, parsing each header value once.

    EmailMessage parses a header through the header registry every time it is read, and
    get_body alone reads Content-Type several times per part: that was 0.7 ms of a 0.8 ms
    email. A parsed header is kept per part, keyed by its name and raw value, so the result
    is what policy.default gives. The structural headers (Content-Type alone costs 0.05 ms
    to parse) take few distinct values across all mail, so short ones are kept for the whole
    process (see _COMMON): equal text in, the same immutable header object out.
    """

    def get(self, name: str, failobj: object = None) -> object:
        name = name.lower()
        first = self._first_headers().get(name)
        if first is None:
            return failobj
        key, raw = first
        common = name in _STRUCTURAL and len(raw) <= _COMMON_VALUE_CHARS
        parsed = _COMMON if common else self.__dict__.setdefault("_parsed", {})
        found = parsed.get(first)
        if found is None:
            # The splitter bounded the headers it knows the parse reads; this holds any
            # other header read here to the same per-header bound (TooComplex).
            mailbounds.check_header(key, raw)
            if common and len(_COMMON) >= _COMMON_MAX:
                _COMMON.clear()  # hostile variety only costs the parse it would anyway
            found = parsed[first] = self.policy.header_fetch_parse(key, raw)
        return found

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._first_headers()

    def _first_headers(self) -> dict[str, tuple[str, str]]:
        """Each header name, lower-case, -> its first (name, raw value), as Message.get
        finds it by a scan that lowers every name (about 150 lower() calls an email).

        Kept with a copy of the header list it was made from and remade whenever the list
        is not equal to it: comparing two lists of the same tuples is a pointer walk, and
        any change to the headers (a set_raw, a replace_header) makes them unequal."""
        headers = self._headers  # type: ignore[attr-defined]  # the part's private header list
        made = self.__dict__.get("_first")
        if made is None or made[0] != headers:
            first: dict[str, tuple[str, str]] = {}
            for key, raw in headers:
                first.setdefault(key.lower(), (key, raw))
            made = self._first = (list(headers), first)
        return made[1]

    def get_content_type(self) -> str:
        """Message's, kept on the Content-Type header object (asked about 20 times an email)."""
        value = self.get("content-type")
        if value is None:
            return super().get_content_type()  # the part's default type
        ctype = getattr(value, "_airlock_ctype", None)
        if ctype is None:
            ctype = value._airlock_ctype = super().get_content_type()  # type: ignore[attr-defined]  # (as _airlock_params)
        return ctype

    def _get_params_preserve(self, failobj: object, header: str) -> object:
        """Message's parameter split, done once per header object and kept on it: charset
        and boundary are asked for several times per part, each time a full re-split."""
        value = self.get(header)
        if value is None:
            return failobj
        params = getattr(value, "_airlock_params", None)
        if params is None:
            params = super()._get_params_preserve(failobj, header)  # type: ignore[misc]  # Message's private helper, which typeshed leaves out
            value._airlock_params = params  # type: ignore[attr-defined]  # header objects are immutable values
        return list(params)


_STRUCTURAL = frozenset({"content-type", "content-transfer-encoding", "content-disposition", "mime-version"})
_COMMON: dict[tuple[str, str], object] = {}
# A parsed header keeps its whole parse tree: "text/plain; charset=utf-8" holds about 10 kB,
# a hostile 64-character value up to about 50 kB (200 characters: 190 kB). So only short
# values are shared (the common ones are; multipart boundaries are unique anyway), and at
# most 256 of them: a few megabytes at worst, whatever the emails hold.
_COMMON_MAX = 256
_COMMON_VALUE_CHARS = 64


class _Registry(email.headerregistry.HeaderRegistry):
    """The stdlib's header registry, making each header class once: its own __getitem__
    builds a new class with type() on every header it parses (about 11 µs each)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]  # passed through as the caller gave them
        self._made: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        made = self._made.get(name.lower())
        if made is None:
            made = self._made[name.lower()] = super().__getitem__(name)
        return made


_POLICY = email.policy.default.clone(header_factory=_Registry())
# Both shown headers are decoded as unstructured text (encoded words decoded, folding
# undone): From is shown as the sender wrote it, not re-rendered by an address parser,
# which cost 0.08 ms an email for text that is only ever displayed (and made an email
# whose From it could not read `mail.broken`).
_AS_TEXT = email.policy.default.clone(header_factory=_Registry(
    default_class=email.headerregistry.UnstructuredHeader, use_default_map=False))


def _header(message: EmailMessage, name: str) -> str:
    """The first `name` header as text."""
    for key, raw in message.raw_items():
        if key.lower() == name:
            return _shown(key, raw)
    return ""


def _shown(name: str, raw: str) -> str:
    """A header's raw value as _AS_TEXT shows it. Without "=?" (where an encoded word would
    start) its parse changes nothing but the line ends it drops and the bytes that are not
    ASCII, which it reads as UTF-8 (email.utils._sanitize), so that is done without it:
    tests/unit/test_mail_fast.py holds the shortcut to the parse."""
    text = simplemail.unfolded(raw)
    if "=?" in text:
        return str(_AS_TEXT.header_fetch_parse(name, raw))
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # email.utils._sanitize


def _from_simple(simple: simplemail.Simple) -> ParsedEmail:
    """_from_message's result for an email simplemail read, its steps in the same order."""
    body = html_to_text(simple.body) if simple.subtype == "html" else simple.body
    return ParsedEmail(
        sender="" if simple.sender_raw is None else _shown("From", simple.sender_raw),
        subject="" if simple.subject_raw is None else _shown("Subject", simple.subject_raw),
        body=body,
        defects=simple.defects,
    )


def _from_message(message: EmailMessage) -> ParsedEmail:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None and not message.is_multipart() and message.get_content_maintype() == "text":
        part = message
    body = ""
    if part is not None:
        body = part.get_content(errors="strict")
        if part.get_content_subtype() == "html":
            body = html_to_text(body)
    attachments = [str(p.get_filename() or p.get_content_type()) for p in message.iter_attachments()] \
        if message.is_multipart() else []
    return ParsedEmail(
        sender=_header(message, "from"),
        subject=_header(message, "subject"),
        body=body,
        attachments=attachments,
        defects=[type(d).__name__ for d in message.defects],
    )


def _raw(message: EmailMessage, name: str) -> str | None:
    """The first `name` header's raw value, or None."""
    for key, raw in message.raw_items():
        if key.lower() == name:
            return raw
    return None


def _header_bytes_problem(message: EmailMessage) -> MailProblem | None:
    """Raw header bytes that are not UTF-8, in any part (reader.charset)."""
    for part in message.walk():
        for name, raw in part.raw_items():
            reason = charset.header_bytes_problem(name, raw)
            if reason:
                return MailProblem("mail.charset", reason)
    return None


def _shown_problem(sender: str | None, subject: str | None) -> MailProblem | None:
    """An encoded word in From or Subject that its charset does not hold (reader.charset)."""
    for name, raw in (("From", sender), ("Subject", subject)):
        reason = charset.encoded_words_problem(name, raw) if raw else None
        if reason:
            return MailProblem("mail.charset", reason)
    return None


def _checked(parsed: ParsedEmail) -> ParsedEmail | MailProblem:
    for text in (parsed.body, parsed.subject, parsed.sender):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return MailProblem("mail.charset", "the declared charset decodes to text that is not valid Unicode")
    if not parsed.body.strip():
        return MailProblem("mail.empty_body", "the email has no readable body text")
    return parsed


def _charset_problem(message: EmailMessage) -> MailProblem | None:
    parts = message.walk() if message.is_multipart() else [message]
    for part in parts:
        declared = part.get_content_charset()
        if not declared:
            continue
        try:
            name = codecs.lookup(declared).name
        except LookupError:
            continue  # get_content() reports an unknown charset itself
        if name in NOT_CHARSETS:
            return MailProblem("mail.charset", f"'{declared}' is not a character set an email may use")
    return None


class _TextOnly(HTMLParser):
    """Keeps text nodes, drops tags, scripts and styles; the result is plain text.

    Its work is bounded: a markup construct that does not end (a tag, comment, declaration or
    processing instruction with no closing mark after it) costs HTMLParser a scan to the end
    of the document, and close() retries every later one: 256 kB of "<!--" took over 60 s,
    of "</" 6.7 s (Python 3.11.7). Each such scan is counted, and past
    mailbounds.MAX_HTML_RESCAN characters the parse stops with TooComplex. HTML that closes
    what it opens never scans in vain, and an odd unclosed construct costs one scan.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._rescanned = 0

    def _scanned(self, start: int, end: int) -> int:
        """Counts a construct at `start` that did not end (end < 0): a scan to the document's end."""
        if end < 0:
            self._rescanned += len(self.rawdata) - start
            if self._rescanned > mailbounds.MAX_HTML_RESCAN:
                raise mailbounds.TooComplex(mailbounds.Exceeded(
                    "html rescan", mailbounds.MAX_HTML_RESCAN, self._rescanned,
                    f"markup in the HTML body that never closes, the last at character {start:,}"))
        return end

    def parse_starttag(self, i: int) -> int:
        return self._scanned(i, super().parse_starttag(i))

    def parse_endtag(self, i: int) -> int:
        return self._scanned(i, super().parse_endtag(i))

    def parse_comment(self, i: int, report: bool = True) -> int:
        return self._scanned(i, super().parse_comment(i, report))

    def parse_html_declaration(self, i: int) -> int:
        return self._scanned(i, super().parse_html_declaration(i))

    def parse_pi(self, i: int) -> int:
        return self._scanned(i, super().parse_pi(i))

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


_START_TAG = re.compile(r"<[a-zA-Z][^>]*")  # a start tag to its ">", or to the end if it has none
_TAG_SEPARATOR = re.compile(r"[\s=/]")


def html_to_text(html: str) -> str:
    """The text of an HTML body; TooComplex (airlock.mailbounds) past the HTML bounds."""
    for tag in _START_TAG.finditer(html):
        # HTMLParser's start-tag pattern keeps a backtracking mark per attribute it tries,
        # about 1 kB each: 250 kB of "<a b=" with no ">" took 70 MB in one match.
        separators = len(_TAG_SEPARATOR.findall(tag.group()))
        if separators > mailbounds.MAX_TAG_SEPARATORS:
            raise mailbounds.TooComplex(mailbounds.Exceeded(
                "tag separators", mailbounds.MAX_TAG_SEPARATORS, separators,
                f"the HTML body's tag at character {tag.start():,}"))
    parser = _TextOnly()
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(parser.parts).split())
