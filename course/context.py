"""Where a student runs the labs, and what to tell them to type there.

Two places: a checkout with `airlock` installed (docs/labs.md), or the compose
file's `lab` container (docs/compose.md, "Labs without Python"), whose image sets
AIRLOCK_LAB_CONTAINER=1. A line that names a command or a lab's file is rendered here for
the place the student is in: in the container, `airlock lab check ...` is the `docker
compose run ... lab check ...` line the student types on the host, and a lesson is
`labs/<id>/README.md` in the repository's folder (the container's /app is not theirs to open).

The graders' own imports (hypothesis, numpy, dkimpy, authres: the `graders` extra) are
checked before any lab command runs: without them every checkpoint would fail with "No
module named ...", a 0 / N that says nothing about the student's code.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airlock.errors import ConfigError
from course.catalog import CHECKOUT

CONTAINER_VARIABLE = "AIRLOCK_LAB_CONTAINER"  # set to 1 by the Dockerfile's lab target
INSTALL_LINE = "pip install -e '.[lab]'"  # the README's first step for a student, in the checkout
CONTAINER_RUN = 'docker compose run --rm -u "$(id -u):$(id -g)"'
CONTAINER_COMMAND = f"{CONTAINER_RUN} lab"
CONTAINER_REBUILD = "docker compose build lab"
# import name -> the distribution that provides it, as the `graders` extra declares it
GRADER_MODULES = {"hypothesis": "hypothesis", "numpy": "numpy", "dkim": "dkimpy", "authres": "authres"}

_LAB_COMMAND = re.compile(r"\bairlock lab\b")


class GraderDependencyMissing(ConfigError):
    """A package the labs' graders import is not installed: no check could mean anything."""


def in_container(environ: Mapping[str, str] | None = None) -> bool:
    """True inside the compose `lab` container (its image sets AIRLOCK_LAB_CONTAINER=1)."""
    return (os.environ if environ is None else environ).get(CONTAINER_VARIABLE) == "1"


def lab_command(arguments: str, environ: Mapping[str, str] | None = None) -> str:
    """The line a student types to run `airlock lab ARGUMENTS` where they are."""
    return f"{CONTAINER_COMMAND} {arguments}" if in_container(environ) else f"airlock lab {arguments}"


def for_student(text: str, environ: Mapping[str, str] | None = None) -> str:
    """A lab's own text (a hint, an instructor note, a grader's message) with each `airlock
    lab` command it names rendered for where the student is; unchanged on the host."""
    if not in_container(environ):
        return text
    return _LAB_COMMAND.sub(lambda _: CONTAINER_COMMAND, text)


def trace_command(data_dir: Path, environ: Mapping[str, str] | None = None) -> str:
    """The line that shows a run's trace (`airlock trace` on that data folder) where the student is."""
    if in_container(environ):
        return f"{CONTAINER_RUN} -e AIRLOCK_DATA_DIR={data_dir} --entrypoint python3 lab -m airlock trace"
    return f"AIRLOCK_DATA_DIR={data_dir} airlock trace"


def lab_path(path: Path, environ: Mapping[str, str] | None = None) -> str:
    """A file as the student can open it. In the container, where the repository's folder is
    the working folder: the checkout's own files (a lesson: the image's /app) and the
    student's (under the working folder) relative to it, as the student sees them."""
    if in_container(environ):
        absolute = Path(os.path.abspath(path))
        for base in (CHECKOUT, Path.cwd()):
            if absolute.is_relative_to(base):
                return absolute.relative_to(base).as_posix()
    return str(path)


def page_missing(environ: Mapping[str, str] | None = None) -> str:
    """Why a lab run has no live page, and what gives it one, where the student is."""
    if in_container(environ):
        return ("the lab container serves no live page (it has no network); the compose lab's page shows "
                f"your code at work: {CONTAINER_COMMAND} compose ID --dir D")
    return f"it needs the dashboard extra: {INSTALL_LINE}"


def install_line(environ: Mapping[str, str] | None = None) -> str:
    """What puts the labs' dependencies in place: the install line, or in the container its image."""
    return CONTAINER_REBUILD if in_container(environ) else INSTALL_LINE


def missing_grader_modules(find_spec: Callable[[str], Any] | None = None) -> list[str]:
    """The graders' distributions whose module cannot be found here, in GRADER_MODULES' order.
    Looked up (importlib.util.find_spec unless given), never imported."""
    find_spec = find_spec or importlib.util.find_spec
    missing = []
    for module, distribution in GRADER_MODULES.items():
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
            found = False
        if not found:
            missing.append(distribution)
    return missing


def require_grader_modules(find_spec: Callable[[str], Any] | None = None,
                           environ: Mapping[str, str] | None = None) -> None:
    """Raise GraderDependencyMissing, one line naming the install line, unless every module
    the labs' graders import is installed."""
    missing = missing_grader_modules(find_spec)
    if not missing:
        return
    where = ("the lab image lacks them: rebuild it" if in_container(environ)
             else "install the labs' extra in the repository's folder")
    raise GraderDependencyMissing(f"the labs' graders need {', '.join(missing)}, not installed here; "
                                  f"{where}: {install_line(environ)}")
