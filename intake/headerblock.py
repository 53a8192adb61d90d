"""An email's header block as a sender's proof reads it: bounded, and split alike by dkimpy and the reader.

Data: the raw email as an SMTP client sent it. Readers: intake/authentication.py, before
dkimpy sees the email. Rationale, two things a valid signature does not settle:

Work. dkimpy matches every name in a signature's h= against the header fields from the
bottom up, per signature, before it knows whether the signature is valid: four signatures
of 5,000 names over 13,000 header lines cost 19 to 22 s of CPU. So the email is measured here
first, in one linear pass: at most MAX_SIGNATURES DKIM-Signature fields, at most
MAX_SIGNED_NAMES names in one h=, at most MAX_HEADER_FIELDS fields in MAX_HEADER_LINES lines.
Past a bound the email proves nothing (it is still delivered, its sender unverified); real
mail is far inside them. The costliest email inside them takes about 0.07 s.

Reading. A signature covers the fields its h= names, as dkimpy splits the block (lines end
at CRLF or LF, nowhere else); the reader splits it with Python's email parser, which also
ends a line at a bare CR, so a field hidden behind one (`X-Note: hi<CR>Subject: ...`) is a
header only to the reader. A block proves something only when both split it alike:

  line ends     every line of the block ends the same way: CRLF (as SMTP carries mail) or LF
                (as a file holds it), and no other CR or LF appears in it
  lines         every line is a field (`name:value`, the name printable ASCII without ":")
                or the continuation of the one above (a space or tab first)
  one of each   each header in SINGLE appears at most once: DKIM signs the last of two
                Subjects, the reader reads the first

Which of these headers a signature must name is authentication.py's rule (all that appear).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airlock import mailbounds

MAX_SIGNATURES = 4  # DKIM-Signature fields: each costs a key lookup, a header match and an RSA verify
MAX_SIGNED_NAMES = 100  # names in one h=: real signers list 5 to 40 (oversigning included)
MAX_HEADER_FIELDS = mailbounds.MAX_HEADER_FIELDS  # as many as the reader's parse takes
MAX_HEADER_LINES = 2 * MAX_HEADER_FIELDS  # folded lines included
# Headers RFC 5322 and MIME allow once, that the reader or a person reads: the reader's parse
# (mailbounds.PARSED: From, Subject, the Content-* headers) and the addressing and date.
SINGLE = mailbounds.PARSED | frozenset({"to", "cc", "reply-to", "date"})

_FIELD = re.compile(rb"([\x21-\x39\x3b-\x7e]+):")  # FeedParser's headerRE and dkimpy's field name, alike
_SIGNED_NAMES = re.compile(rb"(?:\A|;)\s*h\s*=([^;]*)")


@dataclass(frozen=True)
class NotProvable:
    """Why no proof can hold for this email, whatever its signatures say."""

    reason: str


@dataclass(frozen=True)
class Block:
    fields: list[tuple[str, bytes]]  # (lower-case name, raw value up to its last line end), top to bottom

    def values(self, name: str) -> list[bytes]:
        return [value for key, value in self.fields if key == name]


def read(raw: bytes) -> Block | NotProvable:
    """The header block's fields, or why it is past a bound or not split alike by both parsers."""
    end_of_line = line_end(raw)
    crlf = end_of_line == b"\r\n"
    end = raw.find(end_of_line * 2)
    if raw.startswith(end_of_line):
        return NotProvable("the email has no header block")
    block = raw if end < 0 else raw[:end + len(end_of_line)]
    if crlf and (block.count(b"\r") != block.count(b"\r\n") or block.count(b"\n") != block.count(b"\r\n")):
        stray = "a bare CR" if block.count(b"\r") != block.count(b"\r\n") else "a lone LF"
        return NotProvable(f"{stray} in the header block of CRLF lines: the reader would split "
                           "a line there that DKIM does not")
    if not crlf and b"\r" in block:
        return NotProvable("a CR in a header block whose first line ends in a lone LF (a bare CR, or CRLF "
                           "after a lone LF): the reader would split a line there that DKIM does not")
    counted = block.count(end_of_line)  # counted before anything is made per line
    if counted > MAX_HEADER_LINES:
        return NotProvable(f"{counted:,} header lines, over the limit of {MAX_HEADER_LINES:,}")
    lines = block.split(end_of_line)
    if lines and lines[-1] == b"":
        lines.pop()
    fields: list[tuple[str, bytes]] = []
    for number, line in enumerate(lines, 1):
        if line[:1] in (b" ", b"\t") and fields:
            name, value = fields[-1]
            fields[-1] = (name, value + line + end_of_line)
            continue
        field = _FIELD.match(line)
        if field is None:
            return NotProvable(f"header line {number} is neither a field nor the continuation of one")
        fields.append((field.group(1).decode("ascii").lower(), line[field.end():] + end_of_line))
        if len(fields) > MAX_HEADER_FIELDS:
            return NotProvable(f"more than {MAX_HEADER_FIELDS:,} header fields, over the limit")
    return _bounded(Block(fields))


def line_end(raw: bytes) -> bytes:
    """How the email's first line ends, which every header line must: CRLF or LF."""
    first = raw.find(b"\n")
    return b"\r\n" if first > 0 and raw[first - 1:first] == b"\r" else b"\n"


def _bounded(block: Block) -> Block | NotProvable:
    signatures = block.values("dkim-signature")
    if len(signatures) > MAX_SIGNATURES:
        return NotProvable(f"{len(signatures)} DKIM-Signature fields, over the limit of {MAX_SIGNATURES}")
    for signature in signatures:
        names = _SIGNED_NAMES.search(signature)
        count = 0 if names is None else names.group(1).count(b":") + 1
        if count > MAX_SIGNED_NAMES:
            return NotProvable(f"a DKIM-Signature naming {count:,} header fields in h=, "
                               f"over the limit of {MAX_SIGNED_NAMES}")
    seen: dict[str, int] = {}
    for name, _ in block.fields:
        if name in SINGLE:
            seen[name] = seen.get(name, 0) + 1
    twice = sorted(name for name, count in seen.items() if count > 1)
    if twice:
        return NotProvable(f"{seen[twice[0]]} {twice[0]!r} headers: DKIM covers the last, the reader reads the first")
    return block


def unsigned(block: Block, signed_names: frozenset[str]) -> str | None:
    """The first header in SINGLE that the email carries and `signed_names` (an h=, lower-case)
    leaves out, or None: a header the reader reads must be one the signature covers."""
    return next((name for name, _ in block.fields if name in SINGLE and name not in signed_names), None)
