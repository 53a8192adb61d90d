"""The broker's memory of finished outcomes, so an Await for a recent email is answered.

Kept in generations of plain dicts, the newest last: a finished outcome goes into the
newest; when it holds `keep // GENERATIONS` the oldest generation is dropped whole and a
new one begun. So at least the last `keep` outcomes are remembered, and at most
`keep + keep // GENERATIONS`.

Why not one OrderedDict with popitem(last=False): under that churn a dict's table never
shrinks, and its deleted slots make it grow once more long after it is full. Measured with
`airlock bench --soak 12 --rate 400`: the broker's RSS rose about 10 MiB in one
step between 146,000 and 194,000 emails, when the 100,000-entry table doubled to 524,288
slots (plus the OrderedDict's own node array), and was flat after. Each generation here is
built from empty and dropped whole, so no table outlives its generation and the memory is
flat once the first `keep + keep // GENERATIONS` emails have finished.
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

GENERATIONS = 4  # more: a smaller overshoot past `keep`, a few more lookups per Await
Value = TypeVar("Value")


class Recent(Generic[Value]):
    def __init__(self, keep: int) -> None:
        if keep < GENERATIONS:
            raise ValueError(f"keep at least {GENERATIONS} outcomes, not {keep}")
        self._size = keep // GENERATIONS
        # GENERATIONS full generations make `keep`; the newest, filling, is one more. A new
        # generation pushes the oldest out of the deque whole.
        self._generations: collections.deque[dict[str, Value]] = collections.deque([{}], maxlen=GENERATIONS + 1)

    def add(self, key: str, value: Value) -> None:
        if len(self._generations[-1]) >= self._size:
            self._generations.append({})
        self._generations[-1][key] = value

    def get(self, key: str) -> Value | None:
        for generation in reversed(self._generations):
            if key in generation:
                return generation[key]
        return None

    def __contains__(self, key: str) -> bool:
        return any(key in generation for generation in self._generations)

    def __len__(self) -> int:
        return sum(len(generation) for generation in self._generations)
