"""The guided scenario: a short scripted sequence of ready emails a trainer plays on the page.

A scenario is one TOML file (demo/scenario.toml; AIRLOCK_DASHBOARD_DEMO names its folder),
decoded strictly into the Structs below: an unknown key, a missing one or a wrong type is
a ScenarioError naming the step, never a half-read scenario. Each step names one ready
email of the demo's emails/ folder, the task it needs the stack to run, what airlock's card
should end with, and, in the trainer's language, what to look at and what the counters
should show. A step whose card waits for a person names who approves it.

The text of a scenario reaches the page as text (textContent), never as markup; the
commands it holds are shown for the trainer to copy, never run.

    ScenarioError (ConfigError)   the file is unreadable or invalid; `step` is the
     |                            1-based step it names, None for the whole file
     +-- ScenarioMissing          there is no scenario file
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from airlock.errors import ConfigError
from dashboard.inject import Sample, read_sample

LANGUAGES = ("en", "nl", "de", "ru", "tr")  # English and the seeds' languages; English is the fallback
MAX_FILE_BYTES = 256 * 1024  # a scenario is a page of text; more is a mistake, refused before parsing
MAX_STEPS = 32
SWITCH_COMMAND = "AIRLOCK_DEMO_TASK={task} docker compose up -d"
APPROVE_COMMAND = 'docker compose run --rm -u "$(id -u):$(id -g)" approve {id} --as {role} --by {by}'

Outcome = Literal["completed", "rejected", "refused", "escalated", "failed"]
Line = Annotated[str, msgspec.Meta(min_length=1, max_length=400)]
Lines = Annotated[list[Line], msgspec.Meta(min_length=1, max_length=3)]
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
EmailFile = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,123}\.eml$")]

_STEP_PATH = re.compile(r"\$\.steps\[(\d+)\]")


class ScenarioError(ConfigError):
    """A scenario file that cannot be played; the message names the file and the step."""

    def __init__(self, message: str, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


class ScenarioMissing(ScenarioError):
    """No scenario file where the page looks (an image that ships no demo folder)."""


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A misspelt key is an error, not a silently missing note."""


class Text(_Strict, frozen=True, forbid_unknown_fields=True):
    """One line in the trainer's languages: English always, the others where written."""

    en: Line
    nl: Line | None = None
    de: Line | None = None
    ru: Line | None = None
    tr: Line | None = None


class Notes(_Strict, frozen=True, forbid_unknown_fields=True):
    """One to three lines of what to look at, in the trainer's languages."""

    en: Lines
    nl: Lines | None = None
    de: Lines | None = None
    ru: Lines | None = None
    tr: Lines | None = None


class Approval(_Strict, frozen=True, forbid_unknown_fields=True):
    """Who approves an escalated step: a principal's name and the role the task asks for."""

    role: Name
    by: Name


class Step(_Strict, frozen=True, forbid_unknown_fields=True):
    email: EmailFile  # a file of the demo's emails/ folder, by name
    task: Name  # the task the stack must run for this step (tasks/<task>.toml)
    outcome: Outcome  # what airlock's card ends with before anyone approves
    title: Text
    look: Notes  # what to look at while it runs
    counters: Text  # what the counters of both panes should show after it
    approve: Approval | None = None  # only for a step whose outcome is escalated


class Scenario(_Strict, frozen=True, forbid_unknown_fields=True):
    title: Text
    steps: Annotated[list[Step], msgspec.Meta(min_length=1, max_length=MAX_STEPS)]
    # Shown to the trainer: switching the stack's task ({task}) and approving ({id}, {role}, {by}).
    switch_command: Line = SWITCH_COMMAND
    approve_command: Line = APPROVE_COMMAND


def decode(data: bytes, source: str = "scenario") -> Scenario:
    """The scenario in `data`, checked; ScenarioError naming the step otherwise."""
    if len(data) > MAX_FILE_BYTES:
        raise ScenarioError(f"{source}: {len(data)} bytes; a scenario holds at most {MAX_FILE_BYTES}")
    try:
        scenario = msgspec.toml.decode(data, type=Scenario, strict=True)
    except msgspec.ValidationError as exc:
        raise _named(source, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ScenarioError(f"{source}: not TOML: {exc}") from None
    _check_command(source, "switch_command", scenario.switch_command, required={"task"}, allowed={"task"})
    _check_command(source, "approve_command", scenario.approve_command, required={"id"},
                   allowed={"id", "role", "by"})
    for number, step in enumerate(scenario.steps, start=1):
        if (step.outcome == "escalated") != (step.approve is not None):
            raise ScenarioError(f"{source}: step {number} ({step.email}): an escalated step names who approves it "
                                "([steps.approve] role and by), and only an escalated one", number)
    return scenario


def load(path: Path, emails: Path, tasks: Path | None = None) -> Scenario:
    """The scenario file at `path`, each step's email found in the folder `emails` and, when
    `tasks` is given, each step's task a file there; ScenarioError naming the step otherwise."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioMissing(f"no scenario file at {path}") from None
    except OSError as exc:
        raise ScenarioError(f"scenario {path} cannot be read: {exc.strerror or exc}") from None
    scenario = decode(data, str(path))
    for number, step in enumerate(scenario.steps, start=1):
        if not (emails / step.email).is_file():
            raise ScenarioError(f"{path}: step {number}: no email {step.email} in {emails}", number)
        if tasks is not None and not (tasks / f"{step.task}.toml").is_file():
            raise ScenarioError(f"{path}: step {number} ({step.email}): no task {step.task} in {tasks}", number)
    return scenario


def commands(scenario: Scenario, step: Step) -> dict[str, str | None]:
    """The commands the page shows for a step: the task switch, and the approval with
    `{id}` left for the page to fill with the message id it got."""
    approve = None
    if step.approve is not None:
        approve = scenario.approve_command.format(id="{id}", role=step.approve.role, by=step.approve.by)
    return {"switch": scenario.switch_command.format(task=step.task), "approve": approve}


def to_page(scenario: Scenario, labels: dict[str, str]) -> dict[str, Any]:
    """The scenario as the page plays it: each step with the key the page injects it by
    (`demo/<file>`), its email's label and its commands."""
    return {
        "languages": list(LANGUAGES),
        "title": msgspec.to_builtins(scenario.title),
        "steps": [{**msgspec.to_builtins(step), "number": number, "sample": f"demo/{step.email}",
                   "label": labels.get(step.email, step.email), "commands": commands(scenario, step)}
                  for number, step in enumerate(scenario.steps, start=1)],
    }


class Played(msgspec.Struct, frozen=True):
    """GET /api/scenario's answer, decided once at start: the scenario, or why there is none."""

    status: int
    body: dict[str, Any]


def for_page(demo_dir: Path, tasks: Path | None = None) -> tuple[Played, dict[str, Sample]]:
    """The demo folder's scenario for the page (each step's task checked against the folder
    `tasks` when given), and its steps' emails by the key the page injects them with
    (`demo/<file>`). A missing or invalid file is an answer the page shows, never a page
    that does not start."""
    emails_dir = demo_dir / "emails"
    try:
        found = load(demo_dir / "scenario.toml", emails_dir, tasks)
    except ScenarioMissing as exc:
        return Played(404, {"error": str(exc)}), {}
    except ScenarioError as exc:
        return Played(422, {"error": str(exc), "step": exc.step}), {}
    emails = {f"demo/{step.email}": read_sample(emails_dir / step.email, f"demo/{step.email}")
              for step in found.steps}
    labels = {key.removeprefix("demo/"): sample.label for key, sample in emails.items()}
    return Played(200, to_page(found, labels)), emails


def _named(source: str, message: str) -> ScenarioError:
    """msgspec's error, its `$.steps[N]` told as the 1-based step N+1."""
    found = _STEP_PATH.search(message)
    if found is None:
        return ScenarioError(f"{source}: {message}")
    number = int(found.group(1)) + 1
    return ScenarioError(f"{source}: step {number}: {message}", number)


def _check_command(source: str, key: str, template: str, *, required: set[str], allowed: set[str]) -> None:
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ScenarioError(f"{source}: {key}: {exc} (a literal brace is written twice: {{{{ or }}}})") from None
    unknown, missing = fields - allowed, required - fields
    if unknown or missing:
        raise ScenarioError(f"{source}: {key} may hold {', '.join('{' + n + '}' for n in sorted(allowed))}"
                            f" and must hold {', '.join('{' + n + '}' for n in sorted(required))}")
