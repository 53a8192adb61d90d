"""Text -> a value of the declared narrow type, or the rule it broke and why.

The reader's answer is free text written by a model that read hostile mail. Only a value
that matches the declared type in full survives, decoded strictly by msgspec:
- patterns are anchored with \\A..\\Z (a '$' would also match before a trailing newline);
- digits means ASCII [0-9] only: fullwidth, Arabic-Indic and other Unicode digits fail;
- integers are read from ASCII digits only (Python's int() would accept '١٢', '1_000', ' 7');
- nothing is trimmed, lower-cased or otherwise repaired: a near miss is a miss.
"""

from __future__ import annotations

from typing import Any

import msgspec

from airlock.task import ASCII_INTEGER, Choice, Code, Digits, IntegerRange, NarrowType
from airlock.terminal import shown


class Value(msgspec.Struct, frozen=True):
    value: int | str


class Broken(msgspec.Struct, frozen=True):
    rule: str
    reason: str


def read_value(answer: str, narrow: NarrowType, *, truncated: bool = False,
               value_type: Any = None) -> Value | Broken:
    """`value_type` is narrow.msgspec_type(), built once by a caller that reads many answers."""
    name = narrow.__struct_config__.tag
    if not _valid_unicode(answer):  # lone surrogates: not text at all, whatever the type
        return Broken(f"{name}.syntax", "the answer is not valid Unicode text")
    if truncated:
        return Broken(f"{name}.length", "the answer was too long and was cut by the reader")
    if not answer:
        return Broken(f"{name}.empty", "there is no answer")
    candidate: int | str = answer
    if isinstance(narrow, IntegerRange):
        if not ASCII_INTEGER.match(answer):
            return Broken("integer.syntax", f"{shown_answer(answer)} is not an integer in ASCII digits")
        candidate = int(answer)
    try:
        return Value(msgspec.convert(candidate, value_type or narrow.msgspec_type(), strict=True))
    except msgspec.ValidationError as exc:
        detail = f" ({exc})" if isinstance(narrow, IntegerRange) else ""
        return Broken(_rule(narrow), f"{shown_answer(answer)} is not {narrow.describe()}{detail}")


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _rule(narrow: NarrowType) -> str:
    match narrow:
        case Digits() | Code():
            return f"{narrow.__struct_config__.tag}.pattern"
        case IntegerRange():
            return "integer.range"
        case Choice():
            return "choice.unknown"
    return "unknown"


def shown_answer(answer: str, limit: int = 60) -> str:
    """The answer quoted for a reason line, invisibles and bidi controls escaped."""
    return "'" + shown(answer[:limit]) + ("…" if len(answer) > limit else "") + "'"
