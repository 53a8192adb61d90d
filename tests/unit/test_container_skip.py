"""Without a Docker engine the container tests skip with one clear line, unless required."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("required", "code", "says"), [
    ("", 0, "no Docker engine answers: container tests skipped"),
    ("1", 1, "no Docker engine answers: container tests REQUIRED"),
])
def test_no_engine(required: str, code: int, says: str) -> None:
    """A missing engine is a one-line skip, or a failure when AIRLOCK_REQUIRE_DOCKER=1."""
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "AIRLOCK_REQUIRE_DOCKER": required}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/containers/test_lab.py::test_verify_passes_on_the_lab"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stdout[-2000:]
    assert says in done.stdout
