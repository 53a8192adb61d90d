"""The validator against an independent statement of each narrow type's rule.

Each narrow type meets at least CASES generated answers (10,000 under the deep profile CI
loads, a quarter under the default quick one): random text, near misses built
from valid values (a character inserted, digits swapped for look-alikes, whitespace,
casing) and valid values. The oracle below restates the rule with `re` and plain Python,
without msgspec; the validator's verdict must agree with it on every answer. Then every
Unicode decimal digit (Nd), every format character (Cf) and every bidi control is tried,
exhaustively, around and inside a valid value.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pytest
from hypothesis import given, settings, strategies as st

from airlock.task import Choice, Code, Digits, IntegerRange, NarrowType
from tests.conftest import examples
from validator.narrow import Broken, Value, read_value

CASES = examples(10_000)  # generated answers per narrow type: a floor, checked by each test

MISS = object()  # the oracle's "no value"
Oracle = Callable[[str], Any]

# What a reason may never carry raw (it is shown to people): control, format (bidi,
# zero-width), private, surrogate, unassigned, line and paragraph separators.
HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}

DIGITS = Digits(max_length=6)
SMALL_RANGE = IntegerRange(min=1, max=500)
SIGNED_RANGE = IntegerRange(min=-50, max=50)
CHOICE = Choice(choices=["damaged", "late", "wrong_item", "café"])
CODE = Code(pattern="[A-Z]{2}-[0-9]{4}", max_length=7)


# --- the oracles: the rule of each type, stated without the validator's code


def digits_oracle(max_length: int) -> Oracle:
    def oracle(answer: str) -> Any:
        ok = re.fullmatch(rf"[0-9]{{1,{max_length}}}", answer, flags=re.ASCII)
        return answer if ok else MISS
    return oracle


def integer_oracle(low: int, high: int) -> Oracle:
    def oracle(answer: str) -> Any:
        # ASCII digits with an optional leading '-'. At most 19 digits: the validator's
        # syntax cap (any 64-bit bound fits in 19), so "0"*20 + "1" is a miss, not a 1.
        if not re.fullmatch(r"-?[0-9]{1,19}", answer, flags=re.ASCII):
            return MISS
        number = int(answer)
        return number if low <= number <= high else MISS
    return oracle


def choice_oracle(choices: list[str]) -> Oracle:
    def oracle(answer: str) -> Any:
        return answer if answer in choices else MISS
    return oracle


def code_oracle(pattern: str, max_length: int) -> Oracle:
    def oracle(answer: str) -> Any:
        ok = re.fullmatch(pattern, answer, flags=re.ASCII) and len(answer) <= max_length
        return answer if ok else MISS
    return oracle


# --- answers: random text, near misses of valid values, valid values

# Characters that look like, or normalise to, an ASCII digit d.
LOOK_ALIKES = {
    d: [chr(0xFF10 + d), chr(0x0660 + d), chr(0x06F0 + d), chr(0x0966 + d), chr(0x09E6 + d),
        chr(0x2080 + d), "⁰¹²³⁴⁵⁶⁷⁸⁹"[d], chr(0x1D7CE + d), chr(0x1D7D8 + d), chr(0x1D7F6 + d),
        chr(0x2460 + d - 1) if d else "⓪", chr(0x1040 + d), chr(0x0E50 + d)]
    for d in range(10)
}
LOOK_ALIKES[0] += ["O", "o", "Ο", "О"]
LOOK_ALIKES[1] += ["l", "I", "|", "ı", "Ⅰ"]
LOOK_ALIKES[5] += ["S"]
LOOK_ALIKES[8] += ["B"]
LETTER_LOOK_ALIKES = {"A": ["Α", "А", "Ａ", "ᴀ"], "B": ["Β", "В", "Ｂ"], "-": ["‐", "‑", "–", "—", "−", "－"]}

SPACES = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u2003", "\u2028",
          "\u2029", "\u3000", "\u200b", "\ufeff", "\x00"]
BIDI_CONTROLS = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)]

# Any character but a lone surrogate: a Reading's answer reaches the validator as a msgpack
# str, which must be valid UTF-8 (surrogates have their own test at the end).
any_char = st.characters(exclude_categories=["Cs"])
random_text = st.one_of(
    st.text(any_char, max_size=16),
    st.text(st.characters(codec="ascii"), max_size=10),
    st.text("0123456789-+_ .,eE\n\t", max_size=22),
)


def _replace_look_alike(value: str, index: int, pick: int) -> str:
    ch = value[index]
    table = LOOK_ALIKES.get(int(ch)) if ch.isascii() and ch.isdigit() else LETTER_LOOK_ALIKES.get(ch.upper())
    if not table:
        return value + "\u00ad"  # a soft hyphen: invisible, still a miss
    return value[:index] + table[pick % len(table)] + value[index + 1:]


CHANGES = ("insert", "prepend", "append", "delete", "look-alike", "space", "case", "repeat",
           "zeros", "sign", "bidi", "nfd", "truncate")
few_chars = st.text(any_char, min_size=1, max_size=3)


Picked = TypeVar("Picked")
NORMAL_FORMS: list[Literal["NFC", "NFD", "NFKC", "NFKD"]] = ["NFD", "NFKD", "NFC", "NFKC"]


def _pick(draw: st.DrawFn, options: list[Picked]) -> Picked:
    return options[draw(st.integers(0, len(options) - 1))]


@st.composite
def near_misses(draw: st.DrawFn, valid: st.SearchStrategy[str]) -> str:
    """A valid value with one small change; some changes (casing, leading zeros) may keep it valid."""
    value = draw(valid)
    at = draw(st.integers(0, len(value)))
    match draw(st.sampled_from(CHANGES)):
        case "insert":
            return value[:at] + draw(any_char) + value[at:]
        case "prepend":
            return draw(few_chars) + value
        case "append":
            return value + draw(few_chars)
        case "delete":
            return value[:at] + value[at + 1:]
        case "look-alike":
            return _replace_look_alike(value, min(at, len(value) - 1), draw(st.integers(0, 99)))
        case "space":
            space = _pick(draw, SPACES)
            return _pick(draw, [space + value, value + space, value[:at] + space + value[at:]])
        case "case":
            return _pick(draw, [value.upper(), value.lower(), value.title(), value.swapcase()])
        case "repeat":
            return value + _pick(draw, ["", " ", ",", "\n"]) + value
        case "zeros":
            return "0" * draw(st.integers(1, 20)) + value
        case "sign":
            return _pick(draw, ["-", "+", "--", "−"]) + value
        case "bidi":
            return value[:at] + _pick(draw, BIDI_CONTROLS) + value[at:]
        case "nfd":
            return unicodedata.normalize(_pick(draw, NORMAL_FORMS), value)
        case _:
            return value[:at]


def answers(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(random_text, near_misses(valid), valid)


VALID_DIGITS = st.text("0123456789", min_size=1, max_size=7)  # 7: one past the limit


def valid_integers(low: int, high: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(low, high), st.integers(low - 10, high + 10), st.integers(-(10**25), 10**25),
    ).map(str)


VALID_CHOICES = st.sampled_from(CHOICE.choices)
VALID_CODES = st.builds("{}-{}".format, st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=2, max_size=2),
                        st.sampled_from([3, 4, 4, 4, 5]).flatmap(  # 3 and 5: off by one
                            lambda n: st.text("0123456789", min_size=n, max_size=n)))


# --- the checks


def check(answer: str, narrow: NarrowType, oracle: Oracle) -> None:
    """The validator's verdict equals the oracle's, with the right Python type."""
    expected = oracle(answer)
    result = read_value(answer, narrow)
    tag = narrow.__struct_config__.tag
    if expected is MISS:
        assert isinstance(result, Broken), (answer, result)
        assert result.rule.startswith(f"{tag}.") and result.reason
        assert not {unicodedata.category(ch) for ch in result.reason} & HIDDEN_CATEGORIES, result.reason
    else:
        assert result == Value(expected), (answer, result)
        assert type(result.value) is type(expected)  # int for integers (never bool), else str
    cut = read_value(answer, narrow, truncated=True)  # a cut answer never passes, whatever is left
    assert isinstance(cut, Broken) and cut.rule == f"{tag}.length"


def exercise(strategy: st.SearchStrategy[str], narrow: NarrowType, oracle: Oracle) -> int:
    """Run check() on at least CASES generated answers; return how many were tried."""
    tried = 0

    @settings(max_examples=CASES, deadline=None, database=None)
    @given(strategy)
    def run(answer: str) -> None:
        nonlocal tried
        tried += 1
        check(answer, narrow, oracle)

    run()
    return tried


def test_digits_agree_with_the_oracle() -> None:
    """Digits(6): a Value exactly when the answer is 1-6 ASCII digits, kept as text."""
    assert exercise(answers(VALID_DIGITS), DIGITS, digits_oracle(6)) >= CASES


@pytest.mark.parametrize("narrow", [
    pytest.param(SMALL_RANGE, id="1..500"), pytest.param(SIGNED_RANGE, id="-50..50"),
])
def test_integers_agree_with_the_oracle(narrow: IntegerRange) -> None:
    """IntegerRange: a Value exactly for ASCII digits (optional '-') in range, as an int."""
    oracle = integer_oracle(narrow.min, narrow.max)
    assert exercise(answers(valid_integers(narrow.min, narrow.max)), narrow, oracle) >= CASES


def test_choices_agree_with_the_oracle() -> None:
    """Choice: a Value exactly for a member of the list, byte for byte (no case or NFC folding)."""
    assert exercise(answers(VALID_CHOICES), CHOICE, choice_oracle(CHOICE.choices)) >= CASES


def test_codes_agree_with_the_oracle() -> None:
    """Code: a Value exactly when the whole answer matches the pattern within the length cap."""
    oracle = code_oracle(CODE.pattern, CODE.max_length)
    assert exercise(answers(VALID_CODES), CODE, oracle) >= CASES


# --- exhaustive: every Unicode digit, format character and bidi control

STRANGERS = sorted(
    {chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in ("Nd", "Cf")}
    | set(BIDI_CONTROLS)
    | {chr(c) for c in range(0x80)}  # and all of ASCII, for contrast
)


@pytest.mark.parametrize(("narrow", "valid", "oracle"), [
    pytest.param(DIGITS, "4411", digits_oracle(6), id="digits"),
    pytest.param(IntegerRange(min=0, max=999_999), "4411", integer_oracle(0, 999_999), id="integer"),
    pytest.param(CODE, "AB-1234", code_oracle(CODE.pattern, CODE.max_length), id="code"),
])
def test_every_unicode_digit_and_invisible_is_tried(narrow: NarrowType, valid: str, oracle: Oracle) -> None:
    """Each Nd, Cf and bidi character, alone or put at the start, middle and end of a
    valid value: only the oracle's ASCII answers pass."""
    assert sum(unicodedata.category(ch) == "Nd" for ch in STRANGERS) > 600  # not a sample
    middle = len(valid) // 2
    wrong = []
    for ch in STRANGERS:
        for answer in (ch, ch + valid, valid[:middle] + ch + valid[middle:], valid + ch):
            passed = isinstance(read_value(answer, narrow), Value)
            if passed != (oracle(answer) is not MISS):
                wrong.append(f"U+{ord(ch):04X} in {answer!r}: passed={passed}")
    assert not wrong, wrong[:20]
    assert all(not isinstance(read_value(valid[:2] + ch + valid[2:], narrow), Value)
               for ch in STRANGERS if not ch.isascii())


@pytest.mark.parametrize("narrow", [
    pytest.param(DIGITS, id="digits"),
    pytest.param(SMALL_RANGE, id="integer"),
    pytest.param(CHOICE, id="choice"),
    pytest.param(CODE, id="code"),
])
@pytest.mark.parametrize("answer", ["\ud800", "late\udfff", "\udc80AB-1234"])
def test_lone_surrogate_is_broken_not_raised(narrow: NarrowType, answer: str) -> None:
    """A str that is not valid Unicode (never valid on the wire) is still a Broken, not an exception."""
    assert isinstance(read_value(answer, narrow), Broken)
