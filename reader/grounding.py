"""Is the model's answer in the email? Checked by the reader's code, never by the model.

A small model that finds no order number often answers a confident, type-valid one anyway,
copied from the prompt's own examples (docs/model.md: 12345, 20931, 7781). The validator cannot
tell such an invented value from a real one: both are 1-6 ASCII digits. The email can, so
the reader checks it and says so on the Reading (`grounded`); a task that sets
`[value] grounded = true` has the validator reject a value the reader did not find
(`value.not_in_email`).

Grounded means: the answer occurs, exactly as the validator will read it, in the text the
model was shown (Subject and body as prompt.email_text builds them, cut where it is cut; not
the "Subject: " label), as a token of its own: the characters either side are not word
characters (Unicode letters, digits of any script, "_"). So "4411" is in "Bestellung 4411,"
and in "#4411", but not in "44112", "A4411", nor next to a digit of another script
(U+0665 after it, say). The email is not normalised: the validator never turns fullwidth
or Arabic-Indic digits into ASCII (a non-ASCII number is never valid, corpus/README.md), so
"4411" is not grounded by its fullwidth twin (U+FF14 U+FF14 U+FF11 U+FF11); nor are
invisible characters removed, so "555121" is not grounded by 5, 5, 5, 1, 2, 1 joined by U+200D
(the model saw six one-digit tokens). Of the narrow types only `integer` reads a value that
differs from its text ("007" is 7): there a number token of the same value counts, so "7"
grounds the answer "007". Everything else compares the exact text, case included.

Why the reader checks and the validator only decides. The check needs the email, and the
validator must never see the email (it reads answers, not hostile text; docs/guarantees.md).
So the reader, which holds both, runs the check in its own code; the validator enforces the
task's setting and fails closed: a Reading that says nothing (`grounded` absent: a reader from
before this check) is treated as not grounded when the task asks for grounding. The
validator cannot verify the claim, and there is nothing it could verify without the email:
any evidence the reader sent along (a snippet, the token list) would be the reader's word
again. That is acceptable because grounding is not an isolation boundary. The reader is the
untrusted stage; a compromised reader can set `grounded` as it likes, but it could as well
copy any number out of the email, which is grounded by definition, and a hostile email can
make even an honest model answer a number it contains (the data-only attack, which the
guarded task's corroboration refuses). What grounding stops is an honest model inventing a
value: a utility and safety measure against the model's mistakes, enforced by a gate that
trusts only the reader's code, never the model's text.
"""

from __future__ import annotations

import re

from airlock.task import ASCII_INTEGER, Choice, Digits, IntegerRange, NarrowType
from reader.prompt import SUBJECT_LABEL

# A token edge: no word character before or after. Python's \w is Unicode-aware: letters and
# digits of every script, and "_", so an ASCII number touching a non-ASCII digit is no token.
_NUMBER_TOKEN = re.compile(r"(?<![\w-])-?[0-9]+(?!\w)|(?<!\w)[0-9]+(?!\w)")


def grounded(answer: str, text: str, narrow: NarrowType, start: int = 0) -> bool:
    """Whether `answer` occurs in `text[start:]` as a token of its own (see the module
    docstring). `start` skips the reader's own "Subject: " label; the character before it is
    still looked at, so a token that starts at `start` needs a non-word character there."""
    if not answer or not answer.strip():
        return False  # no answer, or only spaces: nothing to look for
    if isinstance(narrow, IntegerRange):
        return _integer_in(answer, text, start)
    pattern = re.compile(rf"(?<!\w){re.escape(answer)}(?!\w)")
    return pattern.search(text, start) is not None


def in_email_text(answer: str, text: str, has_subject: bool, narrow: NarrowType) -> bool:
    """grounded() on the text prompt.email_text built, past the reader's own "Subject: " label:
    the one reading of it for the reader and for the attack scorer alike."""
    return grounded(answer, text, narrow, len(SUBJECT_LABEL) if has_subject else 0)


MAX_CANDIDATES = 64  # more values than this in one email: not listed (reader/constraint.py falls back)
_DIGIT_RUN = re.compile(r"(?<!\w)[0-9]+(?!\w)")


def candidates(text: str, has_subject: bool, narrow: NarrowType) -> list[str] | None:
    """Every value of the narrow type that the email grounds, in order of first appearance:
    what a model may answer under `constrain = "email"` (reader/constraint.py). None where
    they cannot be listed: a `code` pattern, or more than MAX_CANDIDATES of them (a hostile
    email full of numbers must not make the request grow with it)."""
    start = len(SUBJECT_LABEL) if has_subject else 0
    found: list[str]
    if isinstance(narrow, Digits):
        found = [m.group() for m in _DIGIT_RUN.finditer(text, start) if len(m.group()) <= narrow.max_length]
    elif isinstance(narrow, IntegerRange):
        found = [value for m in _NUMBER_TOKEN.finditer(text, start) if len(m.group()) <= 20
                 and narrow.min <= int(value := _number(m.group())) <= narrow.max]
    elif isinstance(narrow, Choice):
        found = list(narrow.choices)
    else:
        return None
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_CANDIDATES:
        return None  # counted before the check below, which scans the text once per value
    return [v for v in unique if in_email_text(v, text, has_subject, narrow)]


def _integer_in(answer: str, text: str, start: int) -> bool:
    """An integer answer is grounded by a number token of the same value: the validator
    passes int(answer), so "007" and "7" are one value. A minus sign counts only where no word
    character or other minus sign precedes it ("12-5" holds 5, not -5)."""
    if not ASCII_INTEGER.match(answer):
        return False  # not an integer the validator would read: it rejects it anyway
    wanted = _number(answer)
    return any(_number(match.group()) == wanted for match in _NUMBER_TOKEN.finditer(text, start))


def _number(digits: str) -> str:
    """A number token's value as canonical text, not int(): an email's 5,000-digit run would
    raise in int() (Python caps str-to-int conversion), and leading zeros must not count."""
    sign, magnitude = ("-", digits[1:]) if digits.startswith("-") else ("", digits)
    magnitude = magnitude.lstrip("0") or "0"
    return magnitude if magnitude == "0" else sign + magnitude  # "-0" is 0
