"""studentcode.shapes: what crosses back from a student's process keeps its shape, and nothing
in it can cost the grader more than its size."""

from __future__ import annotations

import dataclasses
import math

import msgspec
import pytest

from studentcode import shapes


@dataclasses.dataclass(frozen=True)
class Error:
    kind: str


class Point(msgspec.Struct):
    x: int


def test_shapes_round_trip() -> None:
    """Tuples, sets, frozensets, non-text keys, big ints, nan and objects keep their shape."""
    value = [(1, "a"), {2}, frozenset({3}), {(1, 2): "pair"}, 2**80, -(2**70), Error("range"), Point(3), b"raw"]
    back = shapes.decode(shapes.encode(value))
    assert back[:6] == value[:6] and [type(v) for v in back[:4]] == [tuple, set, frozenset, dict]
    assert type(back[6]).__name__ == "Error" and back[6].kind == "range" and back[7].x == 3 and back[8] == b"raw"
    assert math.isnan(shapes.decode(shapes.encode(float("nan"))))


def test_a_subclass_arrives_as_its_base_value() -> None:
    """A str or int whose methods lie arrives as the plain value it holds."""
    class Liar(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    class Big(int):
        def __index__(self) -> int:
            return 7

    back = shapes.decode(shapes.encode([Liar("no"), Big(5)]))
    assert back == ["no", 5] and type(back[0]) is str and type(back[1]) is int


@pytest.mark.parametrize("value", [object(), len, iter([]), type])
def test_what_is_not_data_is_named(value: object) -> None:
    """A function, an iterator, a class or a bare object is NotPlain, naming its type."""
    with pytest.raises(shapes.NotPlain, match=type(value).__name__):
        shapes.encode({"answer": value})


def test_too_deep_is_not_plain() -> None:
    """Nesting past the limit is refused before it reaches the grader."""
    value: list[object] = []
    for _ in range(shapes.MAX_DEPTH + 5):
        value = [value]
    with pytest.raises(shapes.NotPlain, match="deep"):
        shapes.encode(value)


def test_a_large_set_is_refused_before_it_is_built() -> None:
    """A set of colliding hashes costs n² to build: past the cap it is an error, not a stall."""
    colliding = {k * (2**61 - 1) for k in range(1, shapes.MAX_HASHED + 2)}
    with pytest.raises(ValueError, match="more than"):
        shapes.decode(shapes.encode(colliding))
    assert len(shapes.decode(shapes.encode(set(list(colliding)[: shapes.MAX_HASHED])))) == shapes.MAX_HASHED


def test_shape_names_are_safe_class_names() -> None:
    """A class name that is not an identifier becomes Object; the fields are read-only."""
    odd = shapes.shape_class("not a name")({"a": 1})
    assert type(odd).__name__ == "Object" and odd.a == 1
    with pytest.raises(AttributeError):
        odd.a = 2
