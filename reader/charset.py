"""The charset rule: an email's text is read in the charset it declares, exactly, or refused.

Data: an email's raw header values (bytes that are not ASCII kept as surrogates, as the
stdlib's parser keeps them) and its body parts' bytes. Readers: reader.mail (both its
paths) and reader.simplemail. Rationale: a decoder that puts U+FFFD where bytes do not fit
guesses what the sender meant, and a reader that guesses can be led: so each rule below
refuses (`mail.charset`, with a reason naming where and what) instead.

- A body part's bytes decode in the charset its Content-Type names, strictly; where none
  is named, that is US-ASCII (RFC 2045), so 8-bit bytes there are refused too.
- Raw bytes that are not ASCII in any header (RFC 6532 allows them) are UTF-8, strictly.
- An encoded word (RFC 2047) in From or Subject, the headers the reader shows, decodes in
  the charset it names, which must be one Python knows and not one of NOT_CHARSETS.
"""

from __future__ import annotations

import codecs
from email import _header_value_parser as header_parser  # the unstructured header parser policy.default uses
from email.errors import CharsetError

# Codecs an email may not choose: they are not character sets but ways to rewrite text
# (an email in unicode_escape decides that "\u0034" means "4"), or they yield lone
# surrogates. Decoding with them would be a guess at what the sender meant.
NOT_CHARSETS = {"unicode-escape", "raw-unicode-escape", "punycode", "idna", "utf-7", "unicode-internal"}


def header_bytes_problem(name: str, raw: str) -> str | None:
    """Why a raw header value (surrogates for its bytes that are not ASCII) is not UTF-8, or None."""
    if raw.isascii():
        return None
    try:
        raw.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"the {_named(name)} header holds bytes that are not UTF-8: "
                f"{exc.reason} at byte {exc.start:,} of its value")
    return None


def encoded_words_problem(name: str, raw: str) -> str | None:
    """Why an encoded word in a shown header does not decode in the charset it names, or None.
    `raw` has passed header_bytes_problem: its own bytes are UTF-8."""
    if "=?" not in raw:
        return None
    text = raw.encode("utf-8", "surrogateescape").decode("utf-8").replace("\r", "").replace("\n", "")
    tree = header_parser.get_unstructured(text)
    for token in _encoded_words(tree):
        charset = str(getattr(token, "charset", "") or "")
        try:
            known = codecs.lookup(charset).name
        except LookupError:
            return f"the {_named(name)} header has an encoded word in an unknown charset '{charset[:40]}'"
        if known in NOT_CHARSETS:
            return (f"the {_named(name)} header has an encoded word in '{charset[:40]}', "
                    "not a character set an email may use")
    if any(isinstance(defect, CharsetError) for defect in tree.all_defects):
        return f"the {_named(name)} header has an encoded word in an unknown charset"
    decoded = str(tree)
    if not decoded.isascii() and any("\udc80" <= char <= "\udcff" for char in decoded):
        return f"the {_named(name)} header has an encoded word whose bytes are not valid in the charset it names"
    return None


def body_problem(exc: UnicodeDecodeError) -> str:
    """The reason for a body part whose bytes its charset does not hold."""
    named = "ascii (US-ASCII: declared, or none declared)" if exc.encoding == "ascii" else exc.encoding
    return f"the body is not valid {named}: {exc.reason} at byte {exc.start:,}"


def _encoded_words(tree: header_parser.TokenList) -> list[header_parser.TokenList]:
    found: list[header_parser.TokenList] = []
    for token in tree:
        if isinstance(token, header_parser.EncodedWord):
            found.append(token)
        elif isinstance(token, header_parser.TokenList):
            found += _encoded_words(token)
    return found


def _named(name: str) -> str:
    """A header's name as a reason shows it: printable ASCII, cut short."""
    return "".join(char if char.isascii() and char.isprintable() else "?" for char in name[:40])
