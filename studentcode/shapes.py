"""Plain values with their shape kept, for answers that cross from a student's process.

A grader compares what a student's function returned with what it should have: a tuple
is not a list, a set is not a list, an `Error` dataclass is not an `Ok`. Plain msgpack
loses those differences, and pickle would run the student's code in the grader. So the
student's side writes its answer as msgpack extension types that name the shape, and the
grader's side builds plain Python values from them, never an object of the student's:

    tuple, set, frozenset    kept as such
    dict with other keys     kept (a map of text keys is plain msgpack)
    a dataclass, a msgspec Struct
                             a Shape: its class name and its fields; `type(x).__name__`
                             is the student's class name, fields read as attributes
    int past 64 bits         kept
    a subclass of str, int, float, list, dict
                             its base type's value: a str whose __eq__ says yes to
                             everything arrives as the characters it holds

Anything else (a function, a generator, a module, an open file) is NotPlain, named.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
from typing import Any

import msgspec

MAX_DEPTH = 64
MAX_HASHED = 1000  # items of one set or map with non-text keys: colliding hashes cost n² to build
_TUPLE, _SET, _FROZENSET, _MAP, _SHAPE, _BIG_INT = 1, 2, 3, 4, 5, 6
_encode = msgspec.msgpack.Encoder().encode


class NotPlain(Exception):
    """The value holds something that is not plain data (the message names it)."""


def encode(value: Any) -> bytes:
    """The student's side: `value` as msgpack with its shape kept, or NotPlain."""
    try:
        return _encode(_plain(value, 0))
    except RecursionError:
        raise NotPlain(f"a value nested more than {MAX_DEPTH} deep") from None


def _plain(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise NotPlain(f"a value nested more than {MAX_DEPTH} deep")
    deeper = depth + 1
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        number = int.__index__(value)
        if -(2**63) <= number < 2**64:
            return number
        try:
            return _ext(_BIG_INT, str(number))
        except ValueError:  # past Python's own digit limit for int -> str
            raise NotPlain("an int too large to write") from None
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, list):
        return [_plain(item, deeper) for item in list.__iter__(value)]
    if isinstance(value, tuple) and not _is_shape(value):
        return _ext(_TUPLE, [_plain(item, deeper) for item in tuple.__iter__(value)])
    if isinstance(value, frozenset):
        return _ext(_FROZENSET, [_plain(item, deeper) for item in frozenset.__iter__(value)])
    if isinstance(value, set):
        return _ext(_SET, [_plain(item, deeper) for item in set.__iter__(value)])
    if isinstance(value, dict):
        items = list(dict.items(value))
        if all(type(key) is str for key, _ in items):
            return {key: _plain(item, deeper) for key, item in items}
        return _ext(_MAP, [[_plain(key, deeper), _plain(item, deeper)] for key, item in items])
    if _is_shape(value):
        return _ext(_SHAPE, [type(value).__name__, {name: _plain(item, deeper) for name, item in _fields(value)}])
    raise NotPlain(f"a {type(value).__name__} object")


def _is_shape(value: Any) -> bool:
    kind = type(value)
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)) or isinstance(value, msgspec.Struct) \
        or (issubclass(kind, tuple) and hasattr(kind, "_fields"))


def _fields(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, msgspec.Struct):
        return [(name, getattr(value, name)) for name in value.__struct_fields__]
    if isinstance(value, tuple):  # a NamedTuple
        return list(zip(getattr(type(value), "_fields", ()), tuple.__iter__(value), strict=False))
    return [(field.name, getattr(value, field.name)) for field in dataclasses.fields(value)]


def _ext(code: int, inner: Any) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, _encode(inner))


# --- the grader's side ------------------------------------------------------------------


class Shape:
    """A student's object as fields: `type(x).__name__` is its class's name."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        object.__setattr__(self, "fields", fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "fields")[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a student's answer is read, never changed")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and type(other).__name__ == type(self).__name__ \
            and other.fields == self.fields

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        inside = ", ".join(f"{name}={value!r}" for name, value in self.fields.items())
        return f"{type(self).__name__}({inside})"


@functools.lru_cache(maxsize=256)
def shape_class(name: str) -> type[Shape]:
    """The Shape subclass named like the student's class (a safe name if it is not one)."""
    safe = name if name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__") else "Object"
    return type(safe, (Shape,), {"__slots__": ()})


def _ext_hook(code: int, data: memoryview) -> Any:
    inner = _decoder.decode(data)
    if code in (_SET, _FROZENSET, _MAP) and isinstance(inner, list) and len(inner) > MAX_HASHED:
        raise ValueError(f"a set or map of more than {MAX_HASHED} items")
    if code == _TUPLE and isinstance(inner, list):
        return tuple(inner)
    if code == _SET and isinstance(inner, list):
        return set(inner)
    if code == _FROZENSET and isinstance(inner, list):
        return frozenset(inner)
    if code == _MAP and isinstance(inner, list) and all(isinstance(pair, list) and len(pair) == 2 for pair in inner):
        return dict(inner)
    if code == _SHAPE and isinstance(inner, list) and len(inner) == 2 and isinstance(inner[0], str) \
            and isinstance(inner[1], dict):
        return shape_class(inner[0])(inner[1])
    if code == _BIG_INT and isinstance(inner, str) and len(inner) < 5000:
        return int(inner)
    raise ValueError(f"not a shape this decoder knows (extension {code})")


_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def decode(data: bytes) -> Any:
    """The grader's side: the value, or ValueError/TypeError/msgspec.DecodeError for bytes
    that are not one (a set of unhashable items, an unknown extension, ...)."""
    return _decoder.decode(data)
