"""The snapshot a page starts from, as JSON within a byte budget.

Data: the board (cards, counters, system lines, naive runs), whose text fields come from
emails and are escaped (an invisible character is shown as up to ten), and what else the
page needs (its plan, samples, the naive pane's state).
Readers: every page, as the first event of its stream, and GET /api/state.
Rationale: a page's live events wait within its byte budget; a snapshot built whole, beside
it, let 500 emails full of invisible characters make one first event of 50 MB, and each
open page held one. So the snapshot is measured in the bytes it is sent as, item by item,
and holds what fits: the head (counters, plan, everything that is not a list of items)
always; then the cards waiting for a person; then the newest cards, newest system lines and
newest naive runs, each list stopping at its first item that no longer fits. System lines
and naive runs may take an eighth of the budget each, so the cards keep most of it.
`left_out` counts, per list, what the page was not sent: it says so, and the live stream
brings every newer change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from dashboard.state import Board

LISTS = ("cards", "system", "naive_runs")
MINOR_SHARE = 8  # system lines and naive runs may each take 1/MINOR_SHARE of the budget

_json = msgspec.json.Encoder()


def bounded(board: Board, extra: dict[str, Any], budget: int) -> bytes:
    """The snapshot as JSON of at most `budget` bytes (or the head alone, if that is more)."""
    cards = list(board.cards.values())
    waiting = [card for card in cards if card["waiting"]]
    others = [card for card in reversed(cards) if not card["waiting"]]
    # The head with each count at its most, so the real counts never make it longer.
    most = {"cards": len(cards), "system": len(board.system), "naive_runs": len(board.naive)}
    room = budget - len(_head(board, extra, most)) - len(b'"cards":[],"system":[],"naive_runs":[],')
    system = _fill(reversed(board.system), min(room, budget // MINOR_SHARE))
    room -= _size(system)
    naive = _fill(reversed(board.naive.values()), min(room, budget // MINOR_SHARE))
    room -= _size(naive)
    kept_waiting = _fill(waiting, room, stop_at_first=False)
    kept = dict(kept_waiting + _fill(others, room - _size(kept_waiting)))
    chosen = [kept[id(card)] for card in cards if id(card) in kept]  # in the board's order
    left = {"cards": len(cards) - len(chosen), "system": len(board.system) - len(system),
            "naive_runs": len(board.naive) - len(naive)}
    return b"".join([b'{"cards":[', b",".join(chosen),
                     b'],"system":[', b",".join(encoded for _, encoded in reversed(system)),
                     b'],"naive_runs":[', b",".join(encoded for _, encoded in reversed(naive)),
                     b"],", _head(board, extra, left)[1:]])


def _head(board: Board, extra: dict[str, Any], left_out: dict[str, int]) -> bytes:
    """Everything of the snapshot that is not a list of items, as a JSON object."""
    counted = {key: value for key, value in board.snapshot().items() if key not in LISTS}
    return _json.encode({**counted, "waiting": board.waiting(), **extra, "left_out": left_out})


def _fill(items: Iterable[Any], room: int, stop_at_first: bool = True) -> list[tuple[int, bytes]]:
    """(id, JSON) of items, in the order given, while they fit in `room` bytes (a comma
    each): up to the first that does not (`stop_at_first`), or every one that does."""
    kept: list[tuple[int, bytes]] = []
    used = 0
    for item in items:
        encoded = _json.encode(item)
        if used + len(encoded) + 1 > room:
            if stop_at_first:
                break
            continue
        kept.append((id(item), encoded))
        used += len(encoded) + 1
    return kept


def _size(kept: list[tuple[int, bytes]]) -> int:
    return sum(len(encoded) + 1 for _, encoded in kept)
