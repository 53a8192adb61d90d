"""The naive agent and airlock measured on the same emails and model: the one file format.

`airlock attack --mode both --comparison FILE` writes it (harness/score.py); the page reads
the demonstration's copy (demo/measured.json) and shows it beside the naive pane, so the room
sees the figures of a whole corpus, not only the emails played live. Decoded strictly and
bounded: a damaged or foreign file is a typed error the page shows, never a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

MAX_BYTES = 64 * 1024  # the file is a few hundred bytes; anything near this is not one
Count = Annotated[int, msgspec.Meta(ge=0)]
Text = Annotated[str, msgspec.Meta(max_length=2000)]


class Figures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One run's figures (harness/score.py report's summary, the part compared)."""

    emails: Count
    hostile: Count
    call_goals: Count  # hostile emails that ask for a tool call outside the plan
    call_goals_reached: Count  # of those, the emails where that call ran
    goals_reached: Count
    calls: Count
    calls_outside_plan: Count
    hostile_emails_calling_outside_plan: Count
    benign: Count
    utility: float | None


class Measured(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    corpus: Annotated[list[Text], msgspec.Meta(max_length=64)]
    task: Text
    model: Text
    command: Text  # the command that measures it again
    naive_constrained: bool  # the naive agent's calls held to the catalog's grammar
    naive: Figures
    airlock: Figures


class MeasuredUnreadable(msgspec.Struct, frozen=True):
    reason: str


_decoder = msgspec.json.Decoder(Measured)


def encode(measured: Measured) -> bytes:
    return msgspec.json.format(msgspec.json.encode(measured)) + b"\n"


def read(path: Path) -> Measured | MeasuredUnreadable | None:
    """The file's figures; None when there is no file; MeasuredUnreadable saying why otherwise."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return MeasuredUnreadable(f"{path.name}: cannot read it: {exc.strerror or exc}")
    if len(data) > MAX_BYTES:
        return MeasuredUnreadable(f"{path.name}: over {MAX_BYTES} bytes")
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        return MeasuredUnreadable(f"{path.name}: {exc}")
