"""`airlock lab compose ID --dir D`'s override, checked offline with `docker-compose config`
(no engine), for every lab with a plug point: the student's folder read-only in exactly the
one service whose piece it replaces, the task in every service that reads it, the catalog
in the actor, the lab's own run files mounted read-only, every path absolute."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airlock.errors import UsageError
from cli import lab as commands
from course import compose_override
from course.catalog import CHECKOUT, load_all
from course.compose_override import STUDENT_MOUNT, TASK_READERS, HostPaths
from tests import images

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = shutil.which("docker-compose")
needs_compose = pytest.mark.skipif(COMPOSE is None, reason="docker-compose is not installed")
PLUG_LABS = [lab for lab in load_all() if lab.run is not None and not lab.run.phased]


def solution_folder(lab, parent: Path, name: str = "student") -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    for file in lab.student_files:
        shutil.copyfile(lab.solution / file, folder / file)
    return folder


def config(override: Path) -> dict[str, dict[str, Any]]:
    """Each service's mapping in `docker-compose config` output, by name. Read as YAML: the
    output folds a long value (a deep temporary folder) over two lines."""
    done = subprocess.run([str(COMPOSE), "-f", "compose.yaml", "-f", str(override), "config"], cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    services: dict[str, dict[str, Any]] = yaml.safe_load(done.stdout)["services"]
    return services


def binds(service: dict[str, Any]) -> list[dict[str, str]]:
    """The long-syntax volumes of one service, as {"source", "target", "read_only", "type"}."""
    return [{"source": str(v["source"]), "target": str(v["target"]),
             "read_only": str(v.get("read_only", False)).lower(), "type": str(v["type"])}
            for v in service.get("volumes", []) if isinstance(v, dict)]


def env(service: dict[str, Any], key: str) -> str | None:
    value = (service.get("environment") or {}).get(key)
    return None if value is None else str(value)


def mentions(service: dict[str, Any], text: str) -> bool:
    return text in json.dumps(service)


@needs_compose
@pytest.mark.parametrize("lab", [pytest.param(lab, id=lab.id) for lab in PLUG_LABS])
def test_the_override_plugs_the_folder_into_one_service_read_only(lab, tmp_path: Path) -> None:
    """docker-compose accepts it; /student is a read-only bind of the folder in the plug's service alone."""
    student = solution_folder(lab, tmp_path)
    path, _ = compose_override.write(lab, student, HostPaths(environ={}))
    blocks = config(path)
    service = lab.plug(student).service
    with_student = {name for name, block in blocks.items()
                    if any(mentions(block, text) for text in (str(student), "/student", "AIRLOCK_STUDENT"))}
    assert with_student == {service}
    (mount,) = [b for b in binds(blocks[service]) if b["target"] == str(STUDENT_MOUNT)]
    assert mount == {"source": str(student), "target": "/student", "read_only": "true", "type": "bind"}
    assert env(blocks[service], "AIRLOCK_STUDENT_CODE") == f"{lab.run.plug}=/student/{lab.run.file}"


@needs_compose
@pytest.mark.parametrize("lab", [pytest.param(lab, id=lab.id) for lab in PLUG_LABS])
def test_the_override_gives_the_services_the_labs_task_and_catalog(lab, tmp_path: Path) -> None:
    """AIRLOCK_TASK in every service that reads a task, AIRLOCK_CATALOG in the actor; a lab's own
    file is mounted read-only from its absolute path at the place the image would hold it."""
    student = solution_folder(lab, tmp_path)
    path, _ = compose_override.write(lab, student, HostPaths(environ={}))
    blocks = config(path)
    paths = lab.run_paths()
    task_in_image = "/app/" + paths.task.resolve().relative_to(CHECKOUT).as_posix()
    for name in TASK_READERS:
        assert env(blocks[name], "AIRLOCK_TASK") == task_in_image, name
    wanted: dict[Path, tuple[str, ...]] = {paths.task: TASK_READERS}
    if paths.catalog is not None:
        catalog_in_image = "/app/" + paths.catalog.resolve().relative_to(CHECKOUT).as_posix()
        assert env(blocks["actor"], "AIRLOCK_CATALOG") == catalog_in_image
        wanted[paths.catalog] = ("actor",)
    assert [n for n, b in blocks.items() if env(b, "AIRLOCK_CATALOG")] == (["actor"] if paths.catalog else [])
    for file, readers in wanted.items():
        if not file.resolve().is_relative_to(lab.folder):
            continue  # tasks/...: in every service image already
        target = "/app/" + file.resolve().relative_to(CHECKOUT).as_posix()
        for name in readers:
            assert {"source": str(file.resolve()), "target": target, "read_only": "true", "type": "bind"} \
                in binds(blocks[name]), (name, target)
    for name, block in blocks.items():
        for mount in binds(block):
            assert Path(mount["source"]).is_absolute() and mount["read_only"] == "true", (name, mount)


@needs_compose
def test_a_folder_name_compose_would_interpolate_or_split_is_mounted_as_written(tmp_path: Path) -> None:
    """A folder called `$HOME:x,y` is that folder: `$` is escaped and long syntax keeps ':' and ','."""
    lab = next(lab for lab in PLUG_LABS if lab.id == "separation")
    student = solution_folder(lab, tmp_path, "my $HOME:x,y")
    path, _ = compose_override.write(lab, student, HostPaths(environ={}))
    (mount,) = [b for b in binds(config(path)["validator"]) if b["target"] == "/student"]
    # config writes a file compose can read again, so it prints `$` escaped as `$$` in turn
    assert mount["source"].replace("$$", "$") == str(student)


def test_a_lab_with_no_plug_point_is_refused_with_the_way_to_run_it(tmp_path: Path) -> None:
    """red-and-blue: a typed refusal that says it has no plug point and names `lab run`."""
    (lab,) = [lab for lab in load_all() if lab.id == "red-and-blue"]
    with pytest.raises(UsageError, match=r"no plug point.*airlock lab run red-and-blue"):
        compose_override.write(lab, solution_folder(lab, tmp_path), HostPaths(environ={}))


def test_a_folder_without_the_students_file_is_refused(tmp_path: Path) -> None:
    """No checker.py in the folder: refused, naming the file and `lab start`, and nothing written."""
    lab = next(lab for lab in PLUG_LABS if lab.id == "separation")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"checker\.py does not exist.*lab start separation"):
        compose_override.write(lab, tmp_path / "empty", HostPaths(environ={}))
    assert not (tmp_path / "empty" / ".airlock-lab").exists()


def test_in_the_lab_container_paths_are_the_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With AIRLOCK_LAB_HOST_DIR (the lab tool's container), the folder and the lab's files are
    named by their host paths."""
    lab = next(lab for lab in PLUG_LABS if lab.id == "tool-identity")
    workdir = tmp_path / "work"
    student = solution_folder(lab, workdir, "my-tool-identity")
    host = HostPaths(environ={"AIRLOCK_LAB_HOST_DIR": "/home/ann/airlock"}, workdir=workdir)
    services = compose_override.override(lab, student, host)
    assert {"type": "bind", "source": "/home/ann/airlock/my-tool-identity", "target": "/student",
            "read_only": True} in services["actor"]["volumes"]
    assert {"type": "bind", "source": "/home/ann/airlock/labs/tool-identity/run/catalog.toml",
            "target": "/app/labs/tool-identity/run/catalog.toml", "read_only": True} in services["actor"]["volumes"]
    monkeypatch.chdir(workdir)
    assert compose_override.commands(host.shown(student / ".airlock-lab" / "compose.yaml"))[0] == \
        "docker compose -f compose.yaml -f my-tool-identity/.airlock-lab/compose.yaml up -d --build"


@pytest.mark.parametrize(("environ", "inside", "message"), [
    pytest.param({"AIRLOCK_LAB_HOST_DIR": ""}, True, "not the absolute path", id="pwd-unset"),
    pytest.param({"AIRLOCK_LAB_HOST_DIR": "/home/ann/airlock"}, False, "not inside the repository", id="outside"),
])
def test_in_the_lab_container_an_unknown_host_path_is_refused(tmp_path: Path, environ, inside, message) -> None:
    """No host path to write (PWD empty, or a folder the container got from nowhere): a typed refusal."""
    lab = next(lab for lab in PLUG_LABS if lab.id == "separation")
    workdir = tmp_path / "work"
    workdir.mkdir()
    student = solution_folder(lab, workdir if inside else tmp_path)
    with pytest.raises(UsageError, match=message):
        compose_override.override(lab, student, HostPaths(environ=environ, workdir=workdir))


def test_task_readers_are_the_images_that_set_a_task() -> None:
    """TASK_READERS is every service whose image (its Dockerfile target) sets AIRLOCK_TASK, no more, no fewer."""
    stages = images.stages()
    setting = {service for service, target in images.compose_targets().items()
               if "AIRLOCK_TASK=" in images.environment(target, stages)}
    assert setting == set(TASK_READERS)


def test_the_command_writes_the_override_and_prints_both_compose_spellings(tmp_path: Path, capsys,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`lab compose preconditions --dir D`: exit 0, the file written, the v2 and the 1.29 up lines printed."""
    monkeypatch.delenv("AIRLOCK_LAB_HOST_DIR", raising=False)
    lab = next(lab for lab in PLUG_LABS if lab.id == "preconditions")
    student = solution_folder(lab, tmp_path)
    assert commands.main(["compose", "preconditions", "--dir", str(student)]) == 0
    out = capsys.readouterr().out
    override = student / ".airlock-lab" / "compose.yaml"
    assert override.is_file() and "actor.decide=/student/preconditions.py" in override.read_text()
    assert f"docker compose -f compose.yaml -f {override} up -d --build" in out
    assert f"docker-compose -f compose.yaml -f {override} up -d --build" in out


def test_a_task_that_will_not_load_is_one_line_and_exit_78(monkeypatch, capsys) -> None:
    """Any AirlockError a lab command meets is one escaped line and its code, never a traceback."""
    from airlock.errors import EX_CONFIG, TaskError

    def broken(args) -> int:
        raise TaskError("task.toml: unknown key 'x\x1b[31m'")

    monkeypatch.setattr(commands, "cmd_compose", broken)
    assert commands.main(["compose", "preconditions", "--dir", "."]) == EX_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "unknown key" in err
