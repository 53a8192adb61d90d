"""Constrained decoding: ask the model server to produce only a narrow value or NONE.

The narrow type decides what the model may write; the server enforces it while decoding:
- a GBNF grammar (the `grammar` field llama.cpp's llama-server takes on its OpenAI-compatible
  endpoint): the answer is the bare value or NONE, the format the few-shot examples show;
- an OpenAI-style `response_format` JSON schema elsewhere: the answer is {"answer": VALUE}
  or {"answer": "NONE"}, unwrapped here into the bare text the validator reads.

NONE is the explicit way to abstain, in both. Why it must be there (measured, docs/model.md): a
grammar that allows digits only turns a model's "I don't know" (a rambling answer the
validator rejects, so nothing happens) into a confident, type-valid number, often one copied
from the prompt. With NONE allowed, "I don't know" stays a visible rejection (`NONE` is not a
value of any shipped narrow type, so the validator rejects it as before).

The constraint only shapes what the model writes; it is never a check. The validator is the
gate: a server that ignores the field, or a compromised one, gets its answer validated exactly
as an unconstrained one. A constraint is sent only when the task enables it and the endpoint
supports it (AIRLOCK_MODEL_CONSTRAINT: `auto` sends a grammar to a server whose /props says it
is llama.cpp's, and nothing to any other). The task's `[reader] constrain` says how narrow:
- "type": NONE or any value of the narrow type;
- "email": NONE or a value of the narrow type that the email holds as a token of its own
  (reader/grounding.py candidates: the grounding check, applied while decoding). A model then
  cannot write a number it made up or copied from the prompt's examples; it still chooses
  among the email's numbers, so the data-only attack (a hostile email's own number) is not
  stopped by this, only by the plan's checks. Where the values cannot be listed (a `code`,
  or more than grounding.MAX_CANDIDATES), "email" falls back to "type".
The email's values go into the grammar only once they are of the narrow type (ASCII digits,
a number, one of the choices), and as escaped literals: email text never becomes grammar.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from airlock.task import Choice, Digits, IntegerRange, NarrowType

ABSTAIN = "NONE"
Kind = Literal["gbnf", "json_schema"]


def _gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal: printable ASCII as is, everything else escaped."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02X}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return '"' + "".join(out) + '"'


def gbnf(narrow: NarrowType, allowed: list[str] | None = None) -> str | None:
    """The grammar of NONE or one value of the narrow type (or one of `allowed`, the values
    the email holds); None for a type that has no exact grammar here (a `code` pattern is a
    Python regular expression, not GBNF)."""
    abstain = _gbnf_literal(ABSTAIN)
    if allowed is not None:
        return "root ::= " + " | ".join(_gbnf_literal(v) for v in [ABSTAIN, *allowed]) + "\n"
    if isinstance(narrow, Digits):
        return f"root ::= {abstain} | [0-9]{{1,{narrow.max_length}}}\n"
    if isinstance(narrow, IntegerRange):
        # Any int64 written in ASCII digits: the range itself is the validator's to check.
        return f'root ::= {abstain} | "-"? [0-9]{{1,19}}\n'
    if isinstance(narrow, Choice):
        return "root ::= " + " | ".join(_gbnf_literal(c) for c in [ABSTAIN, *narrow.choices]) + "\n"
    return None


def json_schema(narrow: NarrowType, allowed: list[str] | None = None) -> dict[str, Any] | None:
    """The schema of {"answer": NONE or one value of the narrow type (or of `allowed`)}; None
    for a `code` with no values listed: its pattern is Python's, and a JSON-schema one that
    differs would be refused by a server or, worse, mean something else there."""
    value: dict[str, Any]
    if allowed == []:
        return _answer_schema([{"const": ABSTAIN}])  # nothing in the email to answer but NONE
    if allowed is not None:
        value = {"enum": [int(v) for v in allowed] if isinstance(narrow, IntegerRange) else list(allowed)}
    elif isinstance(narrow, Digits):
        value = {"type": "string", "pattern": f"^[0-9]{{1,{narrow.max_length}}}$"}
    elif isinstance(narrow, IntegerRange):
        value = {"type": "integer", "minimum": narrow.min, "maximum": narrow.max}
    elif isinstance(narrow, Choice):
        value = {"type": "string", "enum": list(narrow.choices)}
    else:
        return None
    return _answer_schema([{"const": ABSTAIN}, value])


def _answer_schema(choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "object", "properties": {"answer": {"anyOf": choices}},
            "required": ["answer"], "additionalProperties": False}


def request_fields(kind: Kind, narrow: NarrowType, allowed: list[str] | None = None) -> dict[str, Any] | None:
    """What to add to the chat completion request; None when this type has no such constraint.
    `allowed`: the values the email holds (`constrain = "email"`), already of the narrow type."""
    if kind == "gbnf":
        grammar = gbnf(narrow, allowed)
        return None if grammar is None else {"grammar": grammar}
    schema = json_schema(narrow, allowed)
    if schema is None:
        return None
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": "answer", "strict": True, "schema": schema}}}


class _Wrapped(msgspec.Struct, forbid_unknown_fields=True):
    answer: str | int


_wrapped = msgspec.json.Decoder(_Wrapped)


def unwrap(kind: Kind, text: str) -> str:
    """The bare answer in what a constrained model wrote. A JSON answer that is not exactly
    {"answer": text or integer} is passed on as written, for the validator to reject: a
    server that ignored the schema must not have its text guessed at."""
    if kind != "json_schema":
        return text
    try:
        return str(_wrapped.decode(text).answer)
    except msgspec.DecodeError:
        return text
