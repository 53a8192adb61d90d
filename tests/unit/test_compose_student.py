"""labs/compose.student.yaml, checked offline with `docker-compose config` (no engine): the
student's folder reaches only the validator, read-only, plugged in at validator.check."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = shutil.which("docker-compose")
pytestmark = pytest.mark.skipif(COMPOSE is None, reason="docker-compose is not installed")


def config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMPOSE), "-f", "compose.yaml", "-f", "labs/compose.student.yaml", "config"],
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60)


def services(text: str) -> dict[str, str]:
    """Each service's block of `config` output (YAML, two-space indent), by name."""
    body = text.split("\nservices:\n", 1)[1].split("\nversion:", 1)[0]
    parts = re.split(r"^  ([a-z][a-z0-9_-]*):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_students_folder_is_mounted_read_only_into_the_validator_only(tmp_path: Path) -> None:
    """The validator gets /student read-only and AIRLOCK_STUDENT_CODE; no other service gets either."""
    done = config({"AIRLOCK_STUDENT_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    blocks = services(done.stdout)
    assert f"- {tmp_path}:/student:ro" in blocks["validator"]
    assert "AIRLOCK_STUDENT_CODE: validator.check=/student/checker.py" in blocks["validator"]
    others = {name: block for name, block in blocks.items() if name != "validator"}
    assert others and not [name for name, block in others.items() if "/student" in block or "STUDENT" in block]


def test_without_the_students_folder_compose_refuses_and_says_what_to_set() -> None:
    """No AIRLOCK_STUDENT_DIR: compose stops, naming the variable, instead of mounting nothing."""
    done = config({})
    assert done.returncode != 0 and "set AIRLOCK_STUDENT_DIR" in done.stderr
