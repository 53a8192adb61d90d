"""`airlock lab compose ID --dir D`: the compose lab with a student's code plugged in.

One mechanism for every lab with a plug point, read from the lab.toml `[run]` table (the
single source): the student's folder is mounted read-only at /student into the one
container whose piece it replaces (validator.check -> validator; actor.select,
actor.checks, actor.decide -> actor) and named there by AIRLOCK_STUDENT_CODE; every service
that reads the task gets AIRLOCK_TASK, the actor AIRLOCK_CATALOG. Nothing else of the
student's reaches any container.

Data: the lab's [run] table (plug, file, task, catalog), the student's folder.
Readers: docker compose, as `-f compose.yaml -f D/.airlock-lab/compose.yaml`.
Rationale: the whole folder, not the one file, is mounted, because an editor that saves by
renaming gives the file a new inode, and a bind mount of the file would go on showing the
container the old one. The lab's own run files ("./run/task.toml") are not in any image, so
each is mounted read-only at the place the image would hold it (/app/labs/<id>/...), where
a path inside it relative to the task (recordings, principals) still resolves; the
checkout's files (tasks/...) are in every service image already, so they are named, not
mounted. A rug pull is the lab run's (`airlock lab run`): here the catalog stays as it is.

Paths in the override are absolute host paths: on the host, the folder's own; in the
compose `lab` container (no Python on the host), the container sees the host's folder at
its working directory and is told the host path by AIRLOCK_LAB_HOST_DIR (compose.yaml sets
it from the shell's PWD).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from airlock import task as task_module
from airlock.errors import UsageError
from airlock.plugs import PLUG_POINTS
from course.catalog import CHECKOUT, Lab
from course.runner import STATE_FOLDER

STUDENT_MOUNT = PurePosixPath("/student")
IMAGE_ROOT = PurePosixPath("/app")  # where each service image holds the checkout's files
# The services whose image sets AIRLOCK_TASK (their Dockerfile targets): each reads the task at start.
TASK_READERS = ("broker", "reader", "validator", "actor", "dashboard")
CATALOG_READER = "actor"
HOST_DIR_ENV = "AIRLOCK_LAB_HOST_DIR"
OVERRIDE_NAME = "compose.yaml"


class HostPaths:
    """Where a path this process sees is on the host that runs docker compose."""

    def __init__(self, environ: Mapping[str, str] | None = None, workdir: Path | None = None) -> None:
        env: Mapping[str, str] = os.environ if environ is None else environ
        self.in_container = HOST_DIR_ENV in env
        self.host_dir = Path(env.get(HOST_DIR_ENV, ""))
        self.workdir = (workdir or Path.cwd()).resolve()
        if self.in_container and not self.host_dir.is_absolute():
            raise UsageError(f"{HOST_DIR_ENV}={str(self.host_dir)!r} is not the absolute path of the folder "
                             "mounted at the lab tool's working directory (compose.yaml sets it from PWD: run "
                             "docker compose from a shell in the repository's folder, or set PWD)")

    def student(self, folder: Path) -> Path:
        folder = folder.resolve()
        if not self.in_container:
            return folder
        try:
            return self.host_dir / folder.relative_to(self.workdir)
        except ValueError:
            raise UsageError(f"{folder} is not inside the repository's folder ({self.workdir} in this "
                             "container): only that folder reaches the lab tool") from None

    def lab_file(self, path: Path) -> Path:
        path = path.resolve()
        return self.host_dir / path.relative_to(CHECKOUT) if self.in_container else path

    def shown(self, path: Path) -> str:
        """The override's path as the user types it in the folder they run compose from."""
        try:
            return str(path.resolve().relative_to(self.workdir))
        except ValueError:
            return str(self.student(path))


def _image_path(lab: Lab, path: Path) -> PurePosixPath:
    return IMAGE_ROOT / path.resolve().relative_to(CHECKOUT).as_posix()


def _is_lab_file(lab: Lab, path: Path) -> bool:
    return path.resolve().is_relative_to(lab.folder.resolve())


def override(lab: Lab, student_dir: Path, host: HostPaths) -> dict[str, dict]:
    """The override as a mapping: service name -> {"environment": {...}, "volumes": [...]}."""
    plug, paths = lab.plug(student_dir), lab.run_paths()
    if plug is None or paths is None or lab.run is None:
        raise UsageError(f"lab {lab.id} has no plug point: no container of the compose lab runs a piece of its "
                         f"code (the student writes emails and a guard). `airlock lab run {lab.id} --dir "
                         f"{student_dir}` runs it in private stacks, unguarded then guarded")
    if not student_dir.is_dir():
        raise UsageError(f"{student_dir} is not a folder; `lab start {lab.id} --dir {student_dir}` makes it")
    if not (student_dir / lab.run.file).is_file():
        raise UsageError(f"{student_dir / lab.run.file} does not exist: it is the file the "
                         f"{PLUG_POINTS[plug.point][0]} runs "
                         f"(`lab start {lab.id} --dir {student_dir}` writes the starter)")
    services: dict[str, dict] = {name: {"environment": {}, "volumes": []} for name in TASK_READERS}
    lab_files: dict[Path, tuple[str, ...]] = {paths.task: TASK_READERS}
    if paths.catalog is not None:
        lab_files[paths.catalog] = (CATALOG_READER,)
    task = task_module.load(paths.task)
    for extra in (task.recordings_path, task.principals_path):
        if extra is not None:
            lab_files.setdefault(extra, TASK_READERS)
    for path, readers in lab_files.items():
        if not _is_lab_file(lab, path):
            continue  # in every service image already, at the same place
        for name in readers:
            services[name]["volumes"].append(_bind(host.lab_file(path), _image_path(lab, path)))
    for name in TASK_READERS:
        services[name]["environment"]["AIRLOCK_TASK"] = str(_image_path(lab, paths.task))
    if paths.catalog is not None:
        services[CATALOG_READER]["environment"]["AIRLOCK_CATALOG"] = str(_image_path(lab, paths.catalog))
    target = services[plug.service]
    target["environment"]["AIRLOCK_STUDENT_CODE"] = f"{plug.point}={STUDENT_MOUNT / lab.run.file}"
    target["volumes"].append(_bind(host.student(student_dir), STUDENT_MOUNT))
    return {name: {key: value for key, value in service.items() if value} for name, service in services.items()}


def _bind(source: Path, target: PurePosixPath) -> dict[str, object]:
    """Long syntax: a ':' or ',' in a host path cannot split it, and read_only is spelled out."""
    return {"type": "bind", "source": str(source), "target": str(target), "read_only": True}


def _scalar(value: object) -> str:
    """A YAML scalar: JSON's quoting (YAML reads it), with compose's `$` interpolation escaped,
    so a folder named `$HOME` is that folder, not the variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(str(value).replace("$", "$$"), ensure_ascii=False)


def render(lab: Lab, services: dict[str, dict], command: list[str]) -> str:
    lines = [f"# Written by `airlock lab compose {lab.id}` from labs/{lab.id}/lab.toml [run]; do not edit,",
             "# write it again. Use it as:", *(f"#   {line}" for line in command), "services:"]
    for name, service in services.items():
        lines.append(f"  {name}:")
        if service.get("environment"):
            lines.append("    environment:")
            lines += [f"      {key}: {_scalar(value)}" for key, value in service["environment"].items()]
        if service.get("volumes"):
            lines.append("    volumes:")
            for volume in service["volumes"]:
                lines.append("      - " + "\n        ".join(f"{k}: {_scalar(v)}" for k, v in volume.items()))
    return "\n".join(lines) + "\n"


def commands(shown_path: str) -> list[str]:
    """The up line, for compose v2 and for docker-compose 1.29."""
    files = f"-f compose.yaml -f {shown_path}"
    return [f"docker compose {files} up -d --build", f"docker-compose {files} up -d --build"]


def write(lab: Lab, student_dir: Path, host: HostPaths | None = None) -> tuple[Path, list[str]]:
    """D/.airlock-lab/compose.yaml, written; its path and the lines that start the lab with it."""
    host = host or HostPaths()
    services = override(lab, student_dir, host)
    path = student_dir / STATE_FOLDER / OVERRIDE_NAME
    lines = commands(host.shown(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(lab, services, lines), encoding="utf-8")
    return path, lines
