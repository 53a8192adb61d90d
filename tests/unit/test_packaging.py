"""Images and packaging, read as files: one Dockerfile, each target holding only what its
service runs, every dependency declared once in pyproject and installed from a hashed lock."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import images

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("broker", "reader", "validator", "actor", "intake")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
STAGES = images.stages()
TARGETS = images.compose_targets()  # compose service -> target
IMAGES = sorted(set(TARGETS.values()))
# Each image's dependencies: the lock it installs and the declarations that lock is made from
# (scripts/lock): "kernel" is [project] dependencies, the others are extras.
LOCK_OF = {"cli": "kernel", "broker": "kernel", "reader": "kernel", "validator": "kernel", "actor": "kernel",
           "naive": "kernel", "dashboard": "dashboard", "intake": "smtp", "lab": "graders", "model": "model-source"}
DECLARED_IN = {"kernel": ("kernel",), "dashboard": ("kernel", "dashboard"), "smtp": ("kernel", "smtp"),
               "graders": ("kernel", "graders"), "model-source": ("model",)}
PYTHONS = ("3.11", "3.12")  # Debian bookworm's (airlock/base:bookworm) and python:3.12-slim's


def test_one_dockerfile_builds_every_image() -> None:
    """The root Dockerfile is the only one, and compose builds every image from it by target."""
    dockerfiles = [p.relative_to(ROOT) for p in ROOT.glob("**/Dockerfile*")
                   if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    assert dockerfiles == [Path("Dockerfile")]
    compose = (ROOT / "compose.yaml").read_text()
    assert "dockerfile: Dockerfile\n" in compose and compose.count("dockerfile:") == 1
    assert set(TARGETS.values()) <= set(STAGES)
    assert set(IMAGES) == set(LOCK_OF), "a new image needs its lock named here"


def test_every_image_target_is_built_and_every_other_stage_is_a_step() -> None:
    """The stages that end as a user are exactly the images compose builds; the others
    (dependencies, the shared runtime, the model's compiler) are only built on the way."""
    runnable = {name for name, stage in STAGES.items() if any(line.startswith("USER ") for line in stage.instructions)}
    assert runnable == set(IMAGES)


def test_the_base_is_a_build_argument_defaulting_to_python_slim() -> None:
    """Every chain starts from AIRLOCK_BASE (python:3.12-slim unless the build says otherwise)."""
    text = images.DOCKERFILE.read_text()
    assert re.search(r"^ARG AIRLOCK_BASE=python:3\.12-slim$", text, flags=re.MULTILINE)
    assert {stage.parent for stage in STAGES.values()} - set(STAGES) == {"${AIRLOCK_BASE}"}


@pytest.mark.parametrize("service", SERVICES)
def test_service_image_holds_only_kernel_and_itself(service: str) -> None:
    """A service image copies the kernel, its own package and data, never another service."""
    held = images.holds(service, STAGES)
    packages = {c.rstrip("/") for c in held} & set(SERVICES)
    assert packages == {service}, held
    assert "airlock/" in held


@pytest.mark.parametrize("target", IMAGES)
def test_images_are_non_root_and_install_dependencies_first(target: str) -> None:
    """Each image ends as a non-root user, and its dependencies come from a stage of their
    own that copies nothing but lock files (layer caching: editing code reinstalls nothing)."""
    user = images.last(target, "USER", STAGES)
    assert user and user.split(":")[0] not in ("root", "0"), user
    sources = [other for stage in images.chain(target, STAGES) for other in stage.copies_from()]
    assert sources, f"{target} takes its virtualenv from no dependency stage"
    for other in sources:
        copied = images.holds(other, STAGES)
        assert copied and all(c.startswith("locks/") for c in copied), (other, copied)


@pytest.mark.parametrize("target", [t for t in IMAGES if t != "lab"])
def test_no_image_carries_the_labs(target: str) -> None:
    """Every image but the lab tool's copies nothing of `lab/` or `labs/`, nor the whole
    project: graders, students' reference code, the attack tools and the bench are not part
    of the runtime (the naive agent and the hostile model only of the naive image, below)."""
    copied = [c.rstrip("/") for c in images.holds(target, STAGES)]
    assert not {"lab", "labs", ".", "naive", "bench"} & set(copied), copied
    assert not [c for c in copied if c.startswith(("lab/", "labs/"))], copied


# The packages no service runs: the command line, the operator's tools, the red-team harness and
# its content, the course, the benchmarks, and `lab` (the alias of `airlock lab`).
TOOL_PACKAGES = ("cli", "ops", "harness", "redteam", "course", "bench", "lab")
RUNTIME_IMAGES = (*SERVICES, "dashboard")


def python_files(target: str) -> list[str]:
    """Every .py file of the project the image holds: its COPY lines' sources, folders expanded
    as they are in the build context."""
    files: list[str] = []
    for source in images.holds(target, STAGES):
        path = ROOT / source
        if path.is_file() and path.suffix == ".py":
            files.append(source)
        elif path.is_dir():
            files += sorted(str(p.relative_to(ROOT)) for p in path.rglob("*.py") if "__pycache__" not in p.parts)
    return files


@pytest.mark.parametrize("target", RUNTIME_IMAGES)
def test_service_images_hold_no_operator_course_or_harness_module(target: str) -> None:
    """A service image's Python files are the kernel's and its own package's (the validator's and
    the actor's also the student-code runner's): none of the command line, the operator's
    tools, the course, the harness, the red team or the benchmarks."""
    files = python_files(target)
    allowed = {"airlock", target} | ({"studentcode"} if target in ("validator", "actor") else set())
    assert files and {f.split("/")[0] for f in files} <= allowed, sorted({f.split("/")[0] for f in files})
    assert any(f.startswith(f"{target}/") for f in files) and "airlock/wire.py" in files


# What `python -m redteam.naive.service` imports, file by file: the one image that holds the
# reader and the actor together (the vulnerable design the demonstration shows beside airlock).
NAIVE_SERVICE = "redteam.naive.service"
NAIVE_TOOL_FILES = {"redteam/__init__.py", "harness/__init__.py", "harness/hostile.py"}


def test_the_naive_image_holds_the_kernel_reader_actor_and_naive_agent_only() -> None:
    """The naive image's Python files are the kernel's, the reader's, the actor's, the naive
    agent's and the hostile model's: no broker, validator, page, intake, student-code runner,
    command line, operator tool, course or bench, and of redteam/ and harness/ nothing else."""
    files = python_files("naive")
    tops = {f.split("/")[0] for f in files}
    assert tops == {"airlock", "reader", "actor", "redteam", "harness"}, sorted(tops)
    tools = {f for f in files if f.split("/")[0] in ("redteam", "harness")}
    assert {f for f in tools if not f.startswith("redteam/naive/")} == NAIVE_TOOL_FILES, sorted(tools)
    assert "redteam/naive/__init__.py" in files and "tasks/" in images.holds("naive", STAGES)


def test_only_the_naive_and_lab_images_hold_the_reader_and_the_actor_together() -> None:
    """Reader code and tool code in one image is the naive design: the naive agent's image and
    the lab tool's (its graders start a whole stack); no airlock service's."""
    both = {t for t in IMAGES if {"reader", "actor"} <= {f.split("/")[0] for f in python_files(t)}}
    assert both == {"naive", "lab"}


def test_the_naive_image_holds_every_module_its_service_imports(tmp_path: Path) -> None:
    """Importing the naive service from a tree of only the image's files (the kernel's
    dependencies beside it) loads every project module from that tree: nothing it needs is
    left out of the image."""
    import msgspec

    for source in python_files("naive") + [str(p.relative_to(ROOT)) for p in (ROOT / "tasks").rglob("*")
                                           if p.is_file()]:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_bytes((ROOT / source).read_bytes())
    dependencies = str(Path(msgspec.__file__).parents[1])  # the kernel's lock: msgspec and pyzmq, site-packages
    probe = (f"import sys; sys.path[:0] = [{str(tmp_path)!r}]; sys.path.append({dependencies!r})\n"
             f"import {NAIVE_SERVICE}\n"
             "outside = [m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None)\n"
             f"           and m.__file__.startswith({str(ROOT) + os.sep!r})\n"  # not a sibling such as <root>-venv
             f"           and not m.__file__.startswith({dependencies + os.sep!r})]\n"  # nor a venv inside it
             "print(outside)")
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_only_the_validator_and_the_actor_images_hold_the_student_code_runner() -> None:
    """studentcode/ (which starts a student's code in a child) is in the two images that plug it
    in, and the lab tool's (its graders run students' code); in no other."""
    holding = {t for t in IMAGES if any(f.startswith("studentcode/") for f in python_files(t))}
    assert holding == {"validator", "actor", "lab"}


def test_the_cli_image_holds_the_operator_tools_but_no_course_or_harness() -> None:
    """The CLI image (`docker compose run --rm inject`, the init service) holds the kernel, the
    command line and the operator's tools: no service, course, harness, red team or bench."""
    tops = {f.split("/")[0] for f in python_files("cli")}
    assert tops == {"airlock", "cli", "ops"}, tops


def test_every_python_package_is_installed() -> None:
    """pyproject lists every folder of the project that is a Python package (lab's
    subpackages included), so an install that is not editable misses none of them."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in ROOT.glob("**/__init__.py")
             if p.parent.relative_to(ROOT).parts[0] not in ("tests", "labs", ".venv", "build")
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    assert listed == found


def test_reader_image_has_no_tool_code() -> None:
    """The reader's image copies no actor package and no catalog, by any stage it is built from."""
    text = "\n".join(stage.text() for stage in images.chain("reader", STAGES))
    held = images.holds("reader", STAGES)
    assert "actor" not in text and "catalog" not in text
    assert not [c for c in held if "actor" in c or "catalog" in c], held


def test_lab_image_holds_what_the_graders_import() -> None:
    """The lab tool's image (`docker compose run --rm lab ...`) copies the kernel, the lab
    package, the labs and what the graders run: the four pipeline services (an in-stack
    checkpoint starts a private `airlock up` in the container) and the intake's sender
    verifier (a lab stack admits each email as the SMTP intake would), tasks/ with the
    samples their recordings name, corpus/handmade/. Nothing else: no page."""
    copied = {c.rstrip("/") for c in images.holds("lab", STAGES)}
    stack = {"broker", "reader", "validator", "actor", "intake"}
    assert {"airlock", "lab", "labs", "tasks", "samples", "corpus/handmade"} | stack <= copied, copied
    assert not copied & (set(SERVICES) - stack), copied
    assert "dashboard" not in copied, copied


def test_the_model_image_holds_no_airlock_code() -> None:
    """The model service runs llama.cpp's server, its entrypoint and its build check (model/,
    a shell script and a standard-library one): none of this repository's Python packages."""
    assert [c for c in images.holds("model", STAGES) if not c.startswith("locks/")] == ["model/"]
    scripts = sorted(p.name for p in (ROOT / "model").iterdir() if p.name != "__pycache__")
    assert scripts == ["serve.sh", "smoke.py"], scripts
    imported = re.findall(r"^(?:from|import) (\S+)", (ROOT / "model" / "smoke.py").read_text(), flags=re.MULTILINE)
    assert set(imported) <= {"__future__", "json", "subprocess", "sys", "time", "urllib.error", "urllib.request"}


# --- dependencies: declared once (pyproject), locked with hashes (locks/), installed from the lock


def lock_entries(role: str) -> list[tuple[Requirement, list[str]]]:
    """Each pinned requirement of locks/ROLE.txt with its hashes."""
    text = (ROOT / "locks" / f"{role}.txt").read_text()
    entries = []
    for block in re.split(r"\n(?=\S)", re.sub(r"^#.*\n", "", text, flags=re.MULTILINE)):
        if block.strip():
            head, *hashes = [part.strip() for part in block.split("\\")]
            entries.append((Requirement(head), [h.removeprefix("--hash=") for h in hashes]))
    return entries


def pinned(role: str, python: str) -> dict[str, str]:
    """What locks/ROLE.txt installs on CPython PYTHON (Linux): name -> version."""
    # Marker.evaluate takes what is not given here from this interpreter (default_environment)
    environment = {"python_version": python, "python_full_version": f"{python}.0",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython",
                   "sys_platform": "linux", "platform_system": "Linux"}
    found: dict[str, str] = {}
    for requirement, _ in lock_entries(role):
        if requirement.marker is None or requirement.marker.evaluate(environment):
            (spec,) = requirement.specifier
            assert spec.operator == "==", requirement
            assert canonicalize_name(requirement.name) not in found, f"{role}: {requirement.name} pinned twice"
            found[canonicalize_name(requirement.name)] = spec.version
    return found


def declared(role: str) -> list[Requirement]:
    parts = DECLARED_IN[role]
    return [Requirement(r) for part in parts
            for r in (PROJECT["dependencies"] if part == "kernel" else PROJECT["optional-dependencies"][part])]


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("role", sorted(DECLARED_IN))
def test_each_lock_covers_what_its_extras_declare(role: str, python: str) -> None:
    """Every requirement pyproject declares for a role is pinned in its lock, at a version
    the declaration allows, for each Python an image runs: a declaration changed without
    running scripts/lock fails here (and pip --require-hashes refuses a lock that lacks one
    of a pinned package's dependencies)."""
    versions = pinned(role, python)
    for requirement in declared(role):
        name = canonicalize_name(requirement.name)
        assert name in versions, f"locks/{role}.txt lacks {requirement} (run scripts/lock)"
        assert requirement.specifier.contains(versions[name], prereleases=True), \
            f"locks/{role}.txt pins {name}=={versions[name]}, pyproject wants {requirement} (run scripts/lock)"


@pytest.mark.parametrize("role", sorted(DECLARED_IN))
def test_every_locked_package_carries_its_hashes(role: str) -> None:
    """pip --require-hashes installs a file only if one of these sha256 hashes matches it."""
    entries = lock_entries(role)
    assert entries
    for requirement, hashes in entries:
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), requirement


def test_the_locks_agree_on_every_shared_package() -> None:
    """A package two images share is the same version in both (one resolution, not five)."""
    for python in PYTHONS:
        seen: dict[str, tuple[str, str]] = {}
        for role in sorted(DECLARED_IN):
            for name, version in pinned(role, python).items():
                first = seen.setdefault(name, (role, version))
                assert first[1] == version, f"{name}: {first[0]} pins {first[1]}, {role} pins {version}"


def test_the_lock_script_makes_every_lock_and_no_other() -> None:
    """scripts/lock writes exactly the lock files in locks/ (a lock nobody makes goes stale)."""
    script = (ROOT / "scripts" / "lock").read_text()
    made = set(re.findall(r"\| compile ([a-z-]+)", script))
    assert made == {p.stem for p in (ROOT / "locks").glob("*.txt")}
    assert set(DECLARED_IN) <= made


@pytest.mark.parametrize("target", IMAGES)
def test_each_image_installs_its_lock_with_hashes_required(target: str) -> None:
    """Each image's virtualenv comes from its role's lock, with --require-hashes, and no
    pip command in the Dockerfile names a package of its own (no list besides pyproject's).
    The model image's lock is a source archive, fetched by `pip download` and compiled."""
    role = LOCK_OF[target]
    steps = [step for stage in images.chain(target, STAGES)
             for other in stage.copies_from() for step in images.chain(other, STAGES)]
    installs = [line for stage in steps for line in stage.instructions
                if "pip install" in line or "pip download" in line]
    assert any(f"-r /locks/{role}.txt" in line for line in installs), installs
    assert f"locks/{role}.txt" in {c for stage in steps for c in stage.copies()}


def test_no_pip_install_outside_a_lock() -> None:
    """Every `pip install` in the Dockerfile requires hashes and reads a lock file: nothing
    is installed by name, so nothing escapes the lock."""
    commands = [part for line in images.instructions(images.DOCKERFILE.read_text())
                for part in line.split("&&") if "pip install" in part or "pip download" in part]
    assert commands
    for command in commands:
        assert "--require-hashes" in command and re.search(r"-r /locks/[a-z-]+\.txt\s*$", command), command


def test_dependencies_are_declared_once() -> None:
    """No requirements file besides the locks: pyproject is the one list."""
    lists = [p.relative_to(ROOT) for p in ROOT.glob("**/requirements*.txt")
             if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    assert lists == []
    extras = PROJECT["optional-dependencies"]
    assert "airlock[dashboard,smtp,lab]" in extras["test"] and "airlock[graders]" in extras["lab"]
