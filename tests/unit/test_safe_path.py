"""The project's own processes import the project, never a folder of the same name in the
working folder: a student who cloned the repository runs `airlock lab ...` beside a folder
named airlock, and a class folder may hold anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from airlock.interpreter import python_command
from tests.conftest import ROOT

DECOY = 'raise SystemExit("the decoy package in the working folder was imported")\n'


def test_a_lab_command_beside_a_decoy_airlock_package_runs_the_project(tmp_path: Path) -> None:
    """`airlock lab list` run from a folder holding airlock/, lab/, cli/ and course/ packages
    (decoys) lists the labs: the command never puts the working folder on its path."""
    for name in ("airlock", "lab", "cli", "course"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(DECOY)
    console_script = "import sys; from cli.runtime import main; sys.exit(main())"  # as pip's `airlock` does
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-P", "-c", console_script, "lab", "list"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "separation" in done.stdout and "decoy" not in done.stderr


def test_the_project_starts_its_python_with_safe_path() -> None:
    """The command line every re-exec and child uses is this interpreter with -P first."""
    assert python_command("-m", "lab", "list") == [sys.executable, "-P", "-m", "lab", "list"]
