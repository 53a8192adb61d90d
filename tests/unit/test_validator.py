"""The validator: only a value of the declared narrow type passes, decoded strictly."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from airlock.task import Choice, Code, Digits, IntegerRange
from airlock.wire import Passed, Reading, Rejected
from tests.conftest import examples
from validator.app import Validator
from validator.narrow import Broken, Value, read_value

DIGITS = Digits(max_length=6)


@pytest.mark.parametrize("answer", ["4411", "0", "000123", "999999"])
def test_ascii_digits_pass_as_text(answer: str) -> None:
    """1-6 ASCII digits pass unchanged, leading zeros kept."""
    assert read_value(answer, DIGITS) == Value(answer)


REJECTED_DIGITS = [
    pytest.param("", id="empty"),
    pytest.param("1234567", id="seven-digits"),
    pytest.param("4411 bitte", id="extra-words"),
    pytest.param("4411\n", id="trailing-newline"),
    pytest.param(" 4411", id="leading-space"),
    pytest.param("#4411", id="hash"),
    pytest.param("-4411", id="sign"),
    pytest.param("44.11", id="dot"),
    pytest.param("４４１１", id="fullwidth"),
    pytest.param("٤٤١١", id="arabic-indic"),
    pytest.param("۴۴۱۱", id="extended-arabic-indic"),
    pytest.param("४४११", id="devanagari"),
    pytest.param("⁴⁴¹¹", id="superscript"),
    pytest.param("𝟒𝟒𝟏𝟏", id="math-bold"),
    pytest.param("44\u200b11", id="zero-width-space"),
    pytest.param("\u202e4411", id="bidi-override"),
    pytest.param("4411\u2066", id="bidi-isolate"),
    pytest.param("4411\x00", id="nul"),
    pytest.param("NONE", id="none-word"),
    pytest.param("4411; shop/refund_all()", id="tool-call"),
]


@pytest.mark.parametrize("answer", REJECTED_DIGITS)
def test_everything_else_is_rejected_with_a_rule(answer: str) -> None:
    """Near misses are misses: each gets a rule and a readable reason."""
    result = read_value(answer, DIGITS)
    assert isinstance(result, Broken)
    assert result.rule.startswith("digits.") and result.reason


@given(st.text(max_size=12))
@settings(max_examples=examples(2000))
def test_digits_pass_exactly_when_ascii_pattern_matches(answer: str) -> None:
    """For any text, the verdict equals a full match of [0-9]{1,6} over ASCII."""
    expected = re.fullmatch(r"[0-9]{1,6}", answer, flags=re.ASCII) is not None
    assert isinstance(read_value(answer, DIGITS), Value) is expected


def test_truncated_answers_never_pass() -> None:
    """An answer the reader had to cut is rejected even if what is left looks fine."""
    assert isinstance(read_value("4411", DIGITS, truncated=True), Broken)


RANGE = IntegerRange(min=1, max=100)


@pytest.mark.parametrize(("answer", "expected"), [("1", 1), ("100", 100), ("42", 42), ("007", 7)])
def test_integer_range_passes_ints(answer: str, expected: int) -> None:
    """An integer type yields an int, not text."""
    assert read_value(answer, RANGE) == Value(expected)


@pytest.mark.parametrize("answer", ["0", "101", "-1", "1_0", " 7", "7 ", "+7", "١٢", "1e2", "True", "12.0", "9" * 40])
def test_integer_range_rejects_out_of_range_and_non_ascii(answer: str) -> None:
    """Python's int() would accept some of these; the validator does not."""
    assert isinstance(read_value(answer, RANGE), Broken)


CHOICE = Choice(choices=["damaged", "late", "wrong_item"])


@pytest.mark.parametrize(("answer", "passes"), [
    ("damaged", True), ("late", True), ("Damaged", False), ("damaged.", False),
    ("damaged\n", False), ("refund_all", False), ("late, damaged", False),
])
def test_choice_is_exact(answer: str, passes: bool) -> None:
    """Only an exact member of the list passes."""
    assert isinstance(read_value(answer, CHOICE), Value) is passes


CODE = Code(pattern="[A-Z]{2}-[0-9]{4}", max_length=7)


@pytest.mark.parametrize(("answer", "passes"), [
    ("AB-1234", True), ("AB-1234\n", False), ("xAB-1234", False), ("AB-12345", False), ("ab-1234", False),
])
def test_code_is_anchored(answer: str, passes: bool) -> None:
    """The code pattern must match the whole answer."""
    assert isinstance(read_value(answer, CODE), Value) is passes


def test_handle_emits_passed_or_rejected() -> None:
    """handle() turns a Reading into exactly one Passed or Rejected for the same id."""
    validator = Validator(DIGITS)
    assert validator.handle(Reading(message_id="a", answer="4411", source="model")) == [
        Passed(message_id="a", value="4411")]
    (rejected,) = validator.handle(Reading(message_id="b", answer="4411 bitte", source="model"))
    assert isinstance(rejected, Rejected) and rejected.message_id == "b"
    assert rejected.rule == "digits.pattern" and "4411 bitte" in rejected.reason


def test_reason_escapes_invisible_characters() -> None:
    """A reason never carries a raw bidi control that could reorder what a person reads."""
    result = read_value("\u202e1144", DIGITS)
    assert isinstance(result, Broken) and "\u202e" not in result.reason and "\\u202e" in result.reason


def test_reader_explanation_is_capped_in_the_reason() -> None:
    """The reader's free-text no_answer_because reaches the reason cut to a bounded length."""
    because = "x" * 5000 + "TAIL"
    (rejected,) = Validator(DIGITS).handle(
        Reading(message_id="c", answer="", source="none", no_answer_because=because))
    assert isinstance(rejected, Rejected) and "xxx" in rejected.reason
    assert "TAIL" not in rejected.reason and len(rejected.reason) < 500


# --- grounding: the task rejects a value the reader did not find in the email ---------------

GROUNDED = Digits(max_length=6, grounded=True)


@pytest.mark.parametrize(("grounded", "passes"), [(True, True), (False, False), (None, False)])
def test_a_grounded_task_passes_only_what_the_reader_found(grounded: bool | None, passes: bool) -> None:
    """Only grounded=True passes; a Reading that says nothing (an older reader) fails closed."""
    (out,) = Validator(GROUNDED).handle(Reading(message_id="g", answer="12345", source="model", grounded=grounded))
    if passes:
        assert out == Passed(message_id="g", value="12345")
    else:
        assert isinstance(out, Rejected) and out.rule == "value.not_in_email"
        assert "'12345'" in out.reason and "email" in out.reason


def test_the_reason_tells_unknown_from_not_found() -> None:
    """An older reader's silence is named as such, not as a value missing from the email."""
    def reason(grounded: bool | None) -> str:
        (out,) = Validator(GROUNDED).handle(Reading(message_id="g", answer="1", source="model", grounded=grounded))
        assert isinstance(out, Rejected)
        return out.reason
    assert "not in the email" in reason(False) and "did not say" in reason(None)


@pytest.mark.parametrize("grounded", [True, False, None])
def test_a_task_without_grounding_ignores_the_flag(grounded: bool | None) -> None:
    """grounded = false (the default) keeps today's verdicts, whatever the reader found."""
    assert Validator(DIGITS).handle(Reading(message_id="g", answer="12345", source="model", grounded=grounded)) == [
        Passed(message_id="g", value="12345")]


@pytest.mark.parametrize("answer", ["NONE", "", "4411 bitte", "٤٤١١"])
def test_an_answer_of_the_wrong_shape_keeps_its_type_rule(answer: str) -> None:
    """Abstaining (NONE) and near misses are rejected by the narrow type as before, grounded or
    not: the grounding rule judges only values that are already of the type."""
    (out,) = Validator(GROUNDED).handle(Reading(message_id="g", answer=answer, source="model", grounded=True))
    assert isinstance(out, Rejected) and out.rule.startswith("digits.")


def test_the_grounding_reason_escapes_the_answer() -> None:
    """The answer quoted in the reason is shown escaped, like every other reason."""
    code = Code(pattern="[a-z\u202e]{1,4}", max_length=4, grounded=True)
    (out,) = Validator(code).handle(Reading(message_id="g", answer="ab\u202e", source="model", grounded=False))
    assert isinstance(out, Rejected) and out.rule == "value.not_in_email"
    assert "\u202e" not in out.reason and "\\u202e" in out.reason
