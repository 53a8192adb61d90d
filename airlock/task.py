"""A task file: what the reader asks for, the narrow type of the answer, and the plan.

Tasks are data (TOML). Everything is decoded strictly: an unknown key, a wrong type or a
plan step that is not a full `server/tool` pair stops the process at start. The plan is
read here, before any email exists, and never changes while running.

    name = "order_status"
    [reader]
    instruction = "..."
    recordings = "../samples/recorded/order_status.jsonl"
    [[reader.examples]]
    email = "..."; answer = "4411"
    [value]
    type = "digits"; max_length = 6; grounded = true
    [[plan]]
    call = "shop/lookup_order"; value_into = "order_id"
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from airlock.errors import TaskError

# A tool is named by its full pair; both halves are plain ASCII ids.
TOOL_ID = re.compile(r"\A[a-z][a-z0-9_-]{0,31}\Z")


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Task data: unknown keys are mistakes and fail the load."""


class _Narrow(_Strict, frozen=True, kw_only=True):
    """What every narrow type may add. `grounded = true`: the value must occur in the email
    the model read, as a token of its own (reader/grounding.py checks, the validator rejects
    anything else as `value.not_in_email`). Off unless a task asks: a `choice` usually names
    a class the email need not spell out ("damaged" for "it arrived in pieces")."""

    grounded: bool = False


class Digits(_Narrow, tag="digits", tag_field="type", frozen=True):
    """1..max_length ASCII digits [0-9], kept as text so leading zeros survive."""

    max_length: Annotated[int, msgspec.Meta(ge=1, le=64)]

    def describe(self) -> str:
        return f"1-{self.max_length} ASCII digits"

    def msgspec_type(self) -> Any:
        # \A..\Z, not ^..$: '$' also matches before a trailing newline.
        return Annotated[str, msgspec.Meta(pattern=rf"\A[0-9]{{1,{self.max_length}}}\Z")]


# How an integer answer is written: ASCII digits, an optional minus, at most 19 digits (an
# int64). The validator reads answers by it; the reader's grounding check finds them by it.
ASCII_INTEGER = re.compile(r"\A-?[0-9]{1,19}\Z")


class IntegerRange(_Narrow, tag="integer", tag_field="type", frozen=True):
    """A whole number from min to max inclusive, written in ASCII digits."""

    min: int
    max: int

    def describe(self) -> str:
        return f"an integer from {self.min} to {self.max}"

    def msgspec_type(self) -> Any:
        return Annotated[int, msgspec.Meta(ge=self.min, le=self.max)]


class Choice(_Narrow, tag="choice", tag_field="type", frozen=True):
    """Exactly one of a fixed list of strings (case and spacing must match)."""

    choices: Annotated[list[str], msgspec.Meta(min_length=1, max_length=64)]

    def describe(self) -> str:
        return "one of " + ", ".join(self.choices)

    def msgspec_type(self) -> Any:
        return Literal[tuple(self.choices)]


class Code(_Narrow, tag="code", tag_field="type", frozen=True):
    """A short code matching `pattern` in full (the pattern is anchored for you)."""

    pattern: str
    max_length: Annotated[int, msgspec.Meta(ge=1, le=64)]

    def describe(self) -> str:
        return f"a code matching {self.pattern} (at most {self.max_length} characters)"

    def msgspec_type(self) -> Any:
        return Annotated[
            str, msgspec.Meta(pattern=rf"\A(?:{self.pattern})\Z", max_length=self.max_length)
        ]


NarrowType = Digits | IntegerRange | Choice | Code


class Precondition(_Strict, frozen=True):
    """What a class of tools needs before it may run (lab preconditions). A tool is in the class
    when it matches every class field given. Rules run in the order listed; the actor
    refuses to start on a rule name it does not know."""

    rules: Annotated[list[str], msgspec.Meta(min_length=1)]
    blast_radius: Literal["internal", "third_party"] | None = None
    reversibility: Literal["reversible", "irreversible"] | None = None
    evidence: list[str] = []  # fields that must be present and non-null
    provenance: dict[str, str] = {}  # field -> the lineage it must come from
    corroborate: list[str] = []  # fields that must agree...
    min_sources: Annotated[int, msgspec.Meta(ge=1)] = 2  # ...across this many independent lineages
    approver_role: str = ""


class Example(_Strict, frozen=True):
    email: str
    answer: str


class ReaderSpec(_Strict, frozen=True):
    """`constrain`: ask the model server to decode only NONE or a value of the narrow type
    ("type"), or only NONE or such a value that the email holds ("email"), where the server
    supports it (reader/constraint.py); "off" by default. It shapes what the model writes;
    the validator still checks every answer. "email" on a `choice` allows only the choices
    the email spells out, stricter than the validator even without `grounded`."""

    instruction: str
    examples: list[Example] = []
    recordings: str = ""
    constrain: Literal["off", "type", "email"] = "off"


class Step(_Strict, frozen=True):
    """One planned call: a full server/tool pair, which argument takes the value, the
    permission granted to this step (read unless the task grants write), and optionally
    the sha256 pin of the tool's server, name, description, schema and policy fields."""

    call: str
    value_into: str | None = None
    args: dict[str, str | int | bool] = {}
    grant: Literal["read", "write"] = "read"
    pin: Annotated[str, msgspec.Meta(pattern=r"\A[0-9a-f]{64}\Z")] | None = None

    @property
    def server(self) -> str:
        return self.call.split("/", 1)[0]

    @property
    def tool(self) -> str:
        return self.call.split("/", 1)[1]


class Task(_Strict, frozen=True):
    name: str
    reader: ReaderSpec
    value: NarrowType
    plan: Annotated[list[Step], msgspec.Meta(min_length=1)]
    description: str = ""
    preconditions: list[Precondition] = []
    principals: str = ""  # file of named people and their roles, for approvals
    path: str = ""  # where it was loaded from; set by load(), not by the file

    @property
    def principals_path(self) -> Path | None:
        return (Path(self.path).parent / self.principals).resolve() if self.principals else None

    @property
    def recordings_path(self) -> Path | None:
        if not self.reader.recordings:
            return None
        return (Path(self.path).parent / self.reader.recordings).resolve()

    def value_decoder(self) -> Any:
        """The strict msgspec type every value must satisfy, for convert(strict=True)."""
        return self.value.msgspec_type()


def describe_recordings(task: Task, count: int | None = None) -> str:
    """One line on the task's recorded answers, for `airlock up`'s banner and the reader's
    start line: how many, from which file, or loudly that there are none. `count` is the
    reader's exact number; without it, the file's non-blank lines are counted."""
    path = task.recordings_path
    if path is None:
        return f"none: task {task.path} names no reader.recordings file; without a model no email gets an answer"
    if not path.is_file():
        return (f"none: {path} does not exist (reader.recordings = {task.reader.recordings!r} is relative to "
                f"the task file {task.path}); without a model no email gets an answer")
    if count is None:
        count = sum(1 for line in path.read_bytes().splitlines() if line.strip())
    return f"{count} recorded answer(s) from {path}"


def load(path: str | Path) -> Task:
    """Read and check a task file; raise TaskError naming the file and the problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"task file not found: {_tried(path)}; pass --task FILE (or set AIRLOCK_TASK)"
                        f"{_shipped_hint(path)}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TaskError(f"task file {path} cannot be read: {exc}") from exc
    if "path" in data:
        raise TaskError(f"task file {path}: 'path' is not a task key")
    try:
        task = msgspec.convert({**data, "path": str(path)}, Task, strict=True)
    except msgspec.ValidationError as exc:
        raise TaskError(f"task file {path}: {exc}") from exc
    _check(task, path)
    return task


SHIPPED_TASKS = Path(__file__).resolve().parent.parent / "tasks"  # the tasks in a clone or editable install


def _tried(path: Path) -> str:
    return str(path) if path.is_absolute() else f"{path} (from {Path.cwd()})"


def _shipped_hint(path: Path) -> str:
    if SHIPPED_TASKS.is_dir() and path.resolve().parent != SHIPPED_TASKS:
        return f"; the shipped tasks are in {SHIPPED_TASKS}"
    return ""


def _check(task: Task, path: Path) -> None:
    for number, step in enumerate(task.plan, start=1):
        server, _, tool = step.call.partition("/")
        if not (TOOL_ID.match(server) and TOOL_ID.match(tool)):
            raise TaskError(f"task file {path}: plan step {number} '{step.call}' is not server/tool")
    if isinstance(task.value, IntegerRange) and task.value.min > task.value.max:
        raise TaskError(f"task file {path}: value.min is greater than value.max")
    if isinstance(task.value, Choice) and len(set(task.value.choices)) != len(task.value.choices):
        raise TaskError(f"task file {path}: value.choices has duplicates")
    if isinstance(task.value, Choice) and "NONE" in task.value.choices and task.reader.constrain != "off":
        # Under a constraint NONE is how the model abstains (reader/constraint.py): a choice
        # of the same name would turn "I don't know" into a value the validator passes.
        raise TaskError(f"task file {path}: value.choices names NONE, the answer a constrained model abstains "
                        "with; rename the choice or set reader.constrain = \"off\"")
    if isinstance(task.value, Code):
        try:
            re.compile(task.value.pattern)
        except re.error as exc:
            raise TaskError(f"task file {path}: value.pattern: {exc}") from exc
