"""What the lab writes into the project folder that must never be committed by `git add -A`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("path", [
    pytest.param("airlock-keys/services/broker/broker.key_secret", id="the compose lab's secret keys"),
    pytest.param("airlock-data/trace.jsonl", id="the compose lab's data"),
    pytest.param("airlock-grades/separation.jsonl", id="a trainer's grade history"),
])
def test_the_labs_own_folders_are_ignored(path: str) -> None:
    """git check-ignore says yes for each folder the lab makes in the project's folder."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, check=False)
    assert done.returncode == 0, f"{path} would be committed by git add -A"
