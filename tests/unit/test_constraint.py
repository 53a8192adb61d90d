"""Constrained decoding (reader/constraint.py): the grammar or schema is derived from the
narrow type and always lets the model abstain; "email" lists exactly the values grounding
accepts. When the Asker sends one is tests/integration/test_asker.py's; whether llama-server
takes each grammar, tests/containers/test_model_image.py's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

from airlock import settings as settings_module, task as task_module
from airlock.errors import SettingsError, TaskError
from airlock.task import Choice, Code, Digits, IntegerRange
from reader import constraint, grounding

ROOT = Path(__file__).resolve().parents[2]
TASK = task_module.load(ROOT / "tasks" / "order_status.toml")


def gbnf_strings(grammar: str) -> list[str]:
    """The string literals of a one-rule grammar of alternatives, their escapes decoded."""
    body = grammar.split("::=", 1)[1].strip()
    found = []
    for literal in re.findall(r'"((?:[^"\\]|\\.)*)"', body):
        found.append(re.sub(r"\\(x[0-9A-F]{2}|u[0-9A-F]{4}|U[0-9A-F]{8}|.)",
                            lambda m: chr(int(m[1][1:], 16)) if len(m[1]) > 1 else m[1], literal))
    return found


def test_digits_allow_none_or_the_types_digits() -> None:
    assert constraint.gbnf(Digits(max_length=6)) == 'root ::= "NONE" | [0-9]{1,6}\n'


def test_integers_allow_none_or_a_signed_ascii_number() -> None:
    assert constraint.gbnf(IntegerRange(min=1, max=5)) == 'root ::= "NONE" | "-"? [0-9]{1,19}\n'


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5, unique=True))
def test_every_choice_is_one_exact_literal_after_none(choices: list[str]) -> None:
    """Quotes, backslashes, newlines and non-ASCII are escaped: each literal decodes back to
    its choice, and only printable ASCII appears unescaped."""
    grammar = constraint.gbnf(Choice(choices=choices))
    assert grammar is not None and grammar.count("\n") == 1 and grammar.isascii()
    assert gbnf_strings(grammar) == ["NONE", *choices]


def test_a_code_pattern_has_no_grammar() -> None:
    """A Python regular expression is not GBNF: nothing is sent rather than a wrong grammar."""
    code = Code(pattern="[A-Z]{2}-[0-9]{4}", max_length=7)
    assert constraint.gbnf(code) is None
    assert constraint.request_fields("gbnf", code) is None
    # Nor as a JSON-schema pattern: a Python one need not be one a server takes.
    assert constraint.request_fields("json_schema", code) is None


@pytest.mark.parametrize(("narrow", "value_schema"), [
    (Digits(max_length=6), {"type": "string", "pattern": "^[0-9]{1,6}$"}),
    (IntegerRange(min=-3, max=9), {"type": "integer", "minimum": -3, "maximum": 9}),
    (Choice(choices=["damaged", "late"]), {"type": "string", "enum": ["damaged", "late"]}),
])
def test_the_json_schema_is_an_answer_or_none(narrow: Any, value_schema: dict) -> None:
    schema = constraint.json_schema(narrow)
    assert schema is not None
    assert schema["properties"]["answer"]["anyOf"] == [{"const": "NONE"}, value_schema]
    assert schema["required"] == ["answer"] and schema["additionalProperties"] is False
    fields = constraint.request_fields("json_schema", narrow)
    assert fields == {"response_format": {"type": "json_schema",
                                          "json_schema": {"name": "answer", "strict": True, "schema": schema}}}


@pytest.mark.parametrize(("text", "expected"), [
    ('{"answer": "4411"}', "4411"), ('{"answer": 7}', "7"), ('{"answer": "NONE"}', "NONE"),
    # Not exactly the schema's shape: passed on as written, for the validator to reject.
    ('{"answer": "4411", "also": 1}', '{"answer": "4411", "also": 1}'), ("4411", "4411"),
    ('{"answer": true}', '{"answer": true}'), ('{"answer": ["4411"]}', '{"answer": ["4411"]}'),
])
def test_a_json_answer_is_unwrapped_only_when_it_is_exactly_the_schema(text: str, expected: str) -> None:
    assert constraint.unwrap("json_schema", text) == expected
    assert constraint.unwrap("gbnf", text) == text


def test_the_setting_takes_only_its_words() -> None:
    assert settings_module.load({}).model_constraint == "auto"
    assert settings_module.load({"AIRLOCK_MODEL_CONSTRAINT": " GBNF "}).model_constraint == "gbnf"
    with pytest.raises(SettingsError, match="AIRLOCK_MODEL_CONSTRAINT"):
        settings_module.load({"AIRLOCK_MODEL_CONSTRAINT": "grammar"})


# --- "email": NONE or a value the email holds, the grounding check applied while decoding


@pytest.mark.parametrize(("text", "narrow", "expected"), [
    ("Subject: Bestellung 4411\n\nHallo, 4411 und 777777, Tel. 0612 7153", Digits(max_length=6),
     ["4411", "777777", "0612", "7153"]),
    ("Order 1234567 and 44112 and A4411 and 4411", Digits(max_length=6), ["44112", "4411"]),  # too long; no token
    ("\uff14\uff14\uff11\uff11 and 44\u200d11", Digits(max_length=6), ["44", "11"]),  # no fullwidth digits
    ("Order 007, -3, 12-5 and 99", IntegerRange(min=-5, max=10), ["7", "-3", "5"]),  # by value, in range
    ("it arrived in pieces", Choice(choices=["damaged", "late"]), []),
    ("damaged, or late? damaged", Choice(choices=["damaged", "late"]), ["damaged", "late"]),
    ("AB-1234", Code(pattern="[A-Z]{2}-[0-9]{4}", max_length=7), None),
])
def test_the_candidates_are_exactly_the_values_grounding_accepts(text: str, narrow: Any, expected: list | None) -> None:
    found = grounding.candidates(text, text.startswith("Subject: "), narrow)
    assert found == expected
    for value in found or []:
        assert grounding.in_email_text(value, text, text.startswith("Subject: "), narrow)


@given(st.text(alphabet=st.sampled_from(list("0123456789 -#a\n\u00a0\u200d\uff14")), max_size=60))
def test_every_grounded_digit_value_is_a_candidate(text: str) -> None:
    """No value the validator would accept as grounded is missing from the grammar, and none
    it would refuse is in it: the two are one rule."""
    narrow = Digits(max_length=3, grounded=True)
    found = grounding.candidates(text, False, narrow) or []
    for length in range(1, 4):
        for start in range(len(text) - length + 1):
            value = text[start:start + length]
            if value.isascii() and value.isdigit():
                assert (value in found) == grounding.in_email_text(value, text, False, narrow), value


def test_an_email_full_of_numbers_is_not_listed() -> None:
    text = " ".join(str(n) for n in range(1000, 1000 + grounding.MAX_CANDIDATES + 1))
    assert grounding.candidates(text, False, Digits(max_length=6)) is None
    assert len(grounding.candidates(text.rsplit(" ", 1)[0], False, Digits(max_length=6)) or []) == 64


def test_the_email_grammar_and_schema_list_none_and_the_values() -> None:
    assert constraint.gbnf(Digits(max_length=6), ["4411", "7"]) == 'root ::= "NONE" | "4411" | "7"\n'
    assert constraint.gbnf(Digits(max_length=6), []) == 'root ::= "NONE"\n'  # nothing to answer but NONE
    schema = constraint.json_schema(IntegerRange(min=1, max=9), ["7", "3"])
    assert schema is not None and schema["properties"]["answer"]["anyOf"] == [{"const": "NONE"}, {"enum": [7, 3]}]
    # No value in the email: NONE alone, never an empty enum (which a server may refuse).
    assert constraint.json_schema(Digits(max_length=6), []) == {
        "type": "object", "properties": {"answer": {"anyOf": [{"const": "NONE"}]}}, "required": ["answer"],
        "additionalProperties": False}
    code = Code(pattern="[A-Z]{2}", max_length=2)
    assert constraint.request_fields("json_schema", code, ["AB"]) is not None  # listed values need no pattern


def test_a_choice_named_none_is_refused_where_the_model_abstains_with_none(tmp_path: Path) -> None:
    text = (ROOT / "tasks" / "refund_request.toml").read_text()
    assert 'choices = [' in text
    named = tmp_path / "t.toml"
    text = text.replace('choices = [', 'choices = ["NONE", ', 1).replace('[reader]', '[reader]\nconstrain = "type"', 1)
    named.write_text(text.replace('"../samples/', f'"{ROOT}/samples/'))
    with pytest.raises(TaskError, match="names NONE"):
        task_module.load(named)
    named.write_text(named.read_text().replace('constrain = "type"', 'constrain = "off"'))
    value = task_module.load(named).value
    assert isinstance(value, Choice) and "NONE" in value.choices  # without a constraint, a name like any
