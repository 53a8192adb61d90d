"""Text from an email or a peer, made safe to show on a terminal or in a log line.

An email's charset name, its envelope sender, a model's answer or a reason built from
them can hold ESC sequences (which retitle, recolour or rewrite a trainer's terminal), C1
controls, bidi overrides and isolates (which reorder what a reader sees), zero-width and
other format characters (which hide text), or line and paragraph separators. Every such
character is shown as an escape a person can read, as Python writes it: \\x1b, \\u202e,
\\U000e0041.

`shown` is reversible, so what a person reads is exactly what arrived: a backslash that
could be mistaken for the start of such an escape (one followed by x, u, U, another
backslash or a hidden character) is doubled. Any other backslash, as in most text, is
left alone. `json_line` does the same for machine-readable output: msgspec already
escapes control characters in JSON, but not bidi or format characters, which it writes
as raw UTF-8.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import msgspec

# Cc control, Cf format (bidi, zero-width, tags, soft hyphen), Co private use, Cs lone
# surrogate, Cn unassigned, Zl/Zp line and paragraph separators: none is safe to print.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
_ESCAPE_LETTERS = frozenset("xuU\\")
_json = msgspec.json.Encoder()


def hidden(ch: str) -> bool:
    """True for a character a terminal would act on, hide or reorder instead of show."""
    return unicodedata.category(ch) in HIDDEN_CATEGORIES


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """`text` with every hidden character escaped; plain text comes back unchanged."""
    if text.isprintable() and "\\" not in text:
        return text  # the common case, checked in C: nothing to escape
    out: list[str] = []
    for position, ch in enumerate(text):
        if hidden(ch):
            out.append(_escape(ch))
        elif ch == "\\":
            following = text[position + 1:position + 2]
            ambiguous = following and (following in _ESCAPE_LETTERS or hidden(following))
            out.append("\\\\" if ambiguous else "\\")
        else:
            out.append(ch)
    return "".join(out)


_JSON_HIDDEN = re.compile(r"[^\x00-\x7e]")  # msgspec escapes the controls below 0x20, not DEL


def _json_escape(match: re.Match[str]) -> str:
    ch = match.group()
    if not hidden(ch):
        return ch
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON has no astral escape: a surrogate pair, as json.dumps writes it
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_line(value: Any) -> str:
    """`value` as one line of JSON that decodes to the same value, with no hidden
    character left raw (msgspec escapes the controls below 0x20; this escapes the rest)."""
    text = _json.encode(value).decode()
    return text if text.isascii() and "\x7f" not in text else _JSON_HIDDEN.sub(_json_escape, text)
