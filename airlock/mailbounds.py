"""Bounds on what an email may ask of Python's email parser, checked before it does the work.

Data: the raw bytes of an email, from anyone. Readers: reader.mail (the whole parse) and
airlock.sources and the page (a look at From or Subject). Rationale: the stdlib's header
parser costs up to about 20 µs and keeps up to about 1 kB per character of each header it
parses, and grows faster than linearly: one 70 KB Subject of RFC 2047 encoded words passed
256 MB, 256 KB of them 2.4 GB. Its MIME splitter checks every line against every open
boundary, so nesting multiplies its work too. No email under the size limit may cost more
than a bounded parse, so every caller splits an email with BoundedFeedParser, which counts
as it goes and stops at the first bound passed, before the header parser sees a value; the
reader's HTML reading (reader.mail.html_to_text) holds the last two:

    parts          MAX_PARTS messages and parts in one email
    depth          MAX_DEPTH parts nested in one another (multipart or message/rfc822)
    header fields  MAX_HEADER_FIELDS header fields in the whole email, all parts together
    header chars   MAX_HEADER_CHARS characters in one header the reader parses (PARSED)
    parsed chars   MAX_PARSED_CHARS characters in all the headers the reader parses together
    html rescan    MAX_HTML_RESCAN characters HTMLParser scans in vain for the end of markup
                   that never closes (reader.mail._TextOnly counts them)
    tag separators MAX_TAG_SEPARATORS whitespace, "=" and "/" in one HTML start tag (to its
                   ">"): HTMLParser's start-tag pattern keeps memory for each attribute

Headers nobody parses (Received, References, DKIM-Signature...) are only counted: the
splitter keeps them as strings, at a cost linear in their size. The figures are in
`python -m bench.mailparse`; tests/integration/test_mail_bounds.py holds every shape to
100 MB and 1 s in a child process.
"""

from __future__ import annotations

import email.feedparser
import email.message
import email.policy
from collections.abc import Callable
from typing import TypeVar, overload

import msgspec

MAX_PARTS = 500
MAX_DEPTH = 16
MAX_HEADER_FIELDS = 2_000
MAX_HEADER_CHARS = 4_096
MAX_PARSED_CHARS = 16_384
MAX_TAG_SEPARATORS = 10_000  # a 256 kB data: URI folded at 76 characters has 3,400
MAX_HTML_RESCAN = 2_000_000  # about 0.2 s: 3.8 million took 0.36 s (bench.mailparse)
_FEED_CHARS = 8192  # email.parser.Parser.parse's read size

# The headers the reader's parse reads through the header registry, lower-case: the two it
# shows, and the ones get_body, get_content, iter_attachments and get_filename read on each
# part (Content-ID: a multipart/related's start).
PARSED = frozenset({"from", "subject", "content-type", "content-disposition", "content-transfer-encoding",
                    "content-id", "mime-version"})


class Exceeded(msgspec.Struct, frozen=True):
    """An email past a bound: which bound, its limit, what was found and where."""

    bound: str
    limit: int
    found: int
    where: str = ""

    def reason(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"{self.bound}: {self.found:,} over the limit of {self.limit:,}{where}"


class TooComplex(Exception):
    """Raised inside the splitter to stop it at once; parse() turns it into its Exceeded."""

    def __init__(self, exceeded: Exceeded) -> None:
        super().__init__(exceeded.reason())
        self.exceeded = exceeded


def check_header(name: str, value: str) -> None:
    """One parsed header's own bound; raises TooComplex past it."""
    if len(value) > MAX_HEADER_CHARS:
        raise TooComplex(Exceeded("header chars", MAX_HEADER_CHARS, len(value), f"the {name[:40]!r} header"))


class BoundedFeedParser(email.feedparser.FeedParser):
    """The stdlib's FeedParser, counting parts, depth and headers as it splits the email."""

    def __init__(self, factory: Callable[..., email.message.Message] | None = None, *,
                 policy: email.policy.Policy = email.policy.compat32) -> None:
        super().__init__(factory, policy=policy)
        self._parts = self._fields = self._parsed_chars = 0

    def _new_message(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise TooComplex(Exceeded("parts", MAX_PARTS, self._parts))
        if len(self._msgstack) >= MAX_DEPTH:  # type: ignore[attr-defined]  # FeedParser's private stack of open parts
            raise TooComplex(Exceeded("depth", MAX_DEPTH, len(self._msgstack) + 1))  # type: ignore[attr-defined]  # (as above)
        super()._new_message()  # type: ignore[misc]  # a private hook of FeedParser, stable since 3.2

    def _parse_headers(self, lines: list[str]) -> None:
        # Counted on the raw lines first (a field starts at a line that is not a continuation),
        # so a block of 30,000 fields is refused before the policy makes one of them.
        self._fields += sum(1 for line in lines if line[:1] not in (" ", "\t"))
        if self._fields > MAX_HEADER_FIELDS:
            raise TooComplex(Exceeded("header fields", MAX_HEADER_FIELDS, self._fields))
        before = len(self._cur._headers)  # type: ignore[attr-defined]  # the part being split
        super()._parse_headers(lines)  # type: ignore[misc]  # keeps each header as a string only
        for name, value in self._cur._headers[before:]:  # type: ignore[attr-defined]  # (as two lines above)
            if name.lower() in PARSED:
                check_header(name, value)
                self._parsed_chars += len(value)
        if self._parsed_chars > MAX_PARSED_CHARS:
            raise TooComplex(Exceeded("parsed chars", MAX_PARSED_CHARS, self._parsed_chars,
                                      "From, Subject and the Content-* headers of all parts"))


_M = TypeVar("_M", bound=email.message.Message)


@overload
def parse(raw: bytes, policy: email.policy.Policy, factory: Callable[..., _M],
          headersonly: bool = False) -> _M | Exceeded: ...


@overload
def parse(raw: bytes, policy: email.policy.Policy, factory: None = None,
          headersonly: bool = False) -> email.message.Message | Exceeded: ...


def parse(raw: bytes, policy: email.policy.Policy, factory: Callable[..., email.message.Message] | None = None,
          headersonly: bool = False) -> email.message.Message | Exceeded:
    """email.parser.BytesParser(factory, policy).parsebytes(raw, headersonly), within the
    bounds: the same message, or the first bound the email passes. Anything else the stdlib
    raises on hostile MIME is raised as before."""
    parser = BoundedFeedParser(factory, policy=policy)
    if headersonly:
        parser._set_headersonly()  # type: ignore[attr-defined]  # how BytesParser itself parses headers only
    # As BytesParser does: bytes that are not ASCII survive as surrogates for the policy,
    # fed in the same 8 KiB pieces, so a message within the bounds is the one it would give.
    text = raw.decode("ascii", errors="surrogateescape")
    try:
        for start in range(0, len(text), _FEED_CHARS):
            parser.feed(text[start:start + _FEED_CHARS])
        return parser.close()
    except TooComplex as exc:
        return exc.exceeded
