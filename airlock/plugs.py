"""A lab's plug: which piece of which service a student's file replaces (AIRLOCK_STUDENT_CODE).

A value only, read by the settings every service loads. Running the student's code is
studentcode's, which only the two services that plug it in (validator, actor) import.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from airlock.errors import SettingsError

# Each plug point: the service whose piece it replaces, and the functions the student's
# file must define for it. The service decides what it does with the answers.
PLUG_POINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "validator.check": ("validator", ("check",)),
    "actor.select": ("actor", ("bound_tool_choice",)),
    "actor.checks": ("actor", ("allowlist_problem", "schema_problem", "range_problem")),
    "actor.decide": ("actor", ("decide",)),
}


class Plug(msgspec.Struct, frozen=True):
    """AIRLOCK_STUDENT_CODE: `<point>=<file>`, e.g. `validator.check=/student/checker.py`."""

    point: str
    path: Path

    @property
    def service(self) -> str:
        return PLUG_POINTS[self.point][0]

    @property
    def functions(self) -> tuple[str, ...]:
        return PLUG_POINTS[self.point][1]

    def __str__(self) -> str:
        return f"{self.point}={self.path}"


def parse_plug(text: str) -> Plug | None:
    """The setting's value -> a Plug; empty -> None. Raises SettingsError on anything else."""
    if not text:
        return None
    point, sep, path = text.partition("=")
    if not sep or not path:
        raise SettingsError(f"AIRLOCK_STUDENT_CODE={text!r}: expected <point>=<file.py>, e.g. "
                            "validator.check=/student/checker.py")
    if point not in PLUG_POINTS:
        raise SettingsError(f"AIRLOCK_STUDENT_CODE: unknown plug point {point!r} (known: {sorted(PLUG_POINTS)})")
    if not path.endswith(".py"):
        raise SettingsError(f"AIRLOCK_STUDENT_CODE: {path!r} is not a Python file (.py)")
    return Plug(point, Path(path).absolute())
