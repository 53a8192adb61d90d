"""Images and packaging, read as files: each image holds only what its service runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("broker", "reader", "validator", "actor", "intake")


def copies(dockerfile: Path) -> list[str]:
    return re.findall(r"^COPY (?:--from=\S+ )?(\S+)", dockerfile.read_text(), flags=re.MULTILINE)


def test_requirements_match_pyproject() -> None:
    """The images install exactly the runtime dependencies pyproject declares."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    listed = [l.strip() for l in (ROOT / "requirements.txt").read_text().splitlines()
              if l.strip() and not l.startswith("#")]
    assert sorted(listed) == sorted(declared)


@pytest.mark.parametrize("service", SERVICES)
def test_service_image_holds_only_kernel_and_itself(service: str) -> None:
    """A service image copies the kernel, its own package and data, never another service."""
    copied = copies(ROOT / service / "Dockerfile")
    packages = {c.rstrip("/") for c in copied} & set(SERVICES)
    assert packages == {service}, copied
    assert "airlock/" in copied


@pytest.mark.parametrize("path", [f"{s}/Dockerfile" for s in SERVICES]
                         + ["model/Dockerfile", "airlock/Dockerfile", "lab/Dockerfile"])
def test_images_are_non_root_and_install_dependencies_first(path: str) -> None:
    """Each image ends as a non-root user, takes its base from a build argument, and
    installs dependencies before copying source (layer caching)."""
    text = (ROOT / path).read_text()
    assert re.search(r"^ARG AIRLOCK_BASE=python:3\.12-slim$", text, flags=re.MULTILINE)
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    install = text.find("pip install")
    first_source = min((text.find(f"COPY {p}/") for p in ("airlock", "lab", "labs", *SERVICES) if f"COPY {p}/" in text), default=len(text))
    assert install != -1 and install < first_source


IMAGES = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("*/Dockerfile"))


def test_every_image_is_known() -> None:
    """The images below are every Dockerfile: the services', the page's, the CLI's, the
    model's and the lab tool's; a new one is held to the rule without editing this file."""
    assert {f"{s}/Dockerfile" for s in (*SERVICES, "dashboard", "airlock", "model", "lab")} <= set(IMAGES)


@pytest.mark.parametrize("path", [p for p in IMAGES if p != "lab/Dockerfile"])
def test_no_image_carries_the_labs(path: str) -> None:
    """Every image but the lab tool's copies nothing of `lab/` or `labs/`, nor the whole
    project: graders, students' reference code, the attack tools, the hostile model, the
    naive agent and the bench are not part of the runtime."""
    copied = [c.rstrip("/") for c in copies(ROOT / path)]
    assert not {"lab", "labs", ".", "naive", "bench"} & set(copied), copied
    assert not [c for c in copied if c.startswith(("lab/", "labs/"))], copied


def test_every_python_package_is_installed() -> None:
    """pyproject lists every folder of the project that is a Python package (lab's
    subpackages included), so an install that is not editable misses none of them."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in ROOT.glob("**/__init__.py")
             if p.parent.relative_to(ROOT).parts[0] not in ("tests", "labs", ".venv", "build")
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    assert listed == found


def test_reader_image_has_no_tool_code() -> None:
    """The reader's image copies no actor package and no catalog."""
    text = (ROOT / "reader" / "Dockerfile").read_text()
    assert "actor" not in text and "catalog" not in text


def test_lab_image_holds_what_the_graders_import() -> None:
    """The lab tool's image (`docker compose run --rm lab ...`) copies the kernel, the lab
    package, the labs and what the graders run: the four pipeline services (an in-stack
    checkpoint starts a private `airlock up` in the container) and the intake's sender
    verifier (a lab stack admits each email as the SMTP intake would), tasks/ with the
    samples their recordings name, corpus/handmade/. Nothing else: no page."""
    copied = {c.rstrip("/") for c in copies(ROOT / "lab" / "Dockerfile")}
    stack = {"broker", "reader", "validator", "actor", "intake"}
    assert {"airlock", "lab", "labs", "tasks", "samples", "corpus/handmade"} | stack <= copied, copied
    assert not copied & (set(SERVICES) - stack), copied
    assert "dashboard" not in copied, copied
