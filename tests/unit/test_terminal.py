"""airlock.terminal: what reaches a terminal holds no hidden character and says exactly
what arrived."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, strategies as st

from airlock.terminal import hidden, json_line, shown

# Every Unicode character, lone surrogates included (a str may hold them), weighted
# towards the ones that matter here.
NASTY = st.sampled_from(["\x1b", "\x07", "\x7f", "\x9b", "\x85", "\u202e", "\u2066", "\u2069", "\u200b", "\u200f",
                         "\ufeff", "\u00ad", "\u2028", "\u2029", "\U000e0041", "\udc80", "\\", "x", "u", "U",
                         "1", "b", "]", "0", ";"])
TEXT = st.text(st.one_of(st.characters(), NASTY))
_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def unshown(text: str) -> str:
    """The inverse of shown(), written independently of it: proof that it is reversible."""
    return _ESCAPE.sub(lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1)[1:], 16)), text)


@given(TEXT)
def test_shown_leaves_no_hidden_character(text: str) -> None:
    """No control, format, bidi, separator, private or unassigned character survives."""
    assert not any(hidden(ch) for ch in shown(text))


@given(TEXT)
def test_shown_is_reversible(text: str) -> None:
    """What a person reads decodes back to exactly what arrived: no two texts look alike."""
    assert unshown(shown(text)) == text


@given(st.text(st.characters(exclude_categories=("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"),
                             exclude_characters="\\")))
def test_plain_text_is_unchanged(text: str) -> None:
    """Letters in any script, spaces and punctuation are shown as they are."""
    assert shown(text) == text


@pytest.mark.parametrize(("raw", "seen"), [
    pytest.param("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07", id="osc-retitle"),
    pytest.param("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H", id="csi-clear"),
    pytest.param("\x9b31m", "\\x9b31m", id="c1-csi"),
    pytest.param("invoice\u202efdp.exe", "invoice\\u202efdp.exe", id="bidi-override"),
    pytest.param("a\u2066b\u2069", "a\\u2066b\\u2069", id="bidi-isolate"),
    pytest.param("pay\u200bpal", "pay\\u200bpal", id="zero-width"),
    pytest.param("line\nbreak\r", "line\\x0abreak\\x0d", id="newlines"),
    pytest.param("C:\\temp", "C:\\temp", id="plain-backslash-kept"),
    pytest.param("\\x1b", "\\\\x1b", id="literal-escape-doubled"),
    pytest.param("utf-8", "utf-8", id="plain"),
])
def test_shown_examples(raw: str, seen: str) -> None:
    """The escapes a trainer sees, as Python writes them."""
    assert shown(raw) == seen


WHOLE_TEXT = TEXT.filter(lambda t: not re.search("[\ud800-\udfff]", t))  # text with no lone surrogate


@given(st.recursive(st.none() | st.booleans() | st.integers() | WHOLE_TEXT,
                    lambda inner: st.lists(inner) | st.dictionaries(WHOLE_TEXT, inner),
                    max_leaves=8))
def test_json_line_is_the_same_value_with_nothing_hidden(value) -> None:
    """--json output decodes to the same value and holds no raw bidi or control character."""
    line = json_line(value)
    assert json.loads(line) == value
    assert not any(hidden(ch) for ch in line) and "\n" not in line


def test_json_line_escapes_bidi() -> None:
    """msgspec writes U+202E raw; json_line writes it as an escape JSON readers understand."""
    assert json_line({"reason": "a\u202eb"}) == '{"reason":"a\\u202eb"}'


def test_json_line_escapes_del() -> None:
    """DEL is a control character msgspec leaves raw (JSON allows it); a terminal does not."""
    assert json_line("a\x7fb") == '"a\\u007fb"'
