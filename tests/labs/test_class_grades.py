"""`airlock lab grade` on a real class: every student's code rerun through the runner (each
checkpoint in its own process), a forged progress.json ignored, nothing written into a
student's folder, the attempts kept in the trainer's history; and `check --junit` for a
course's own CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from course.catalog import find
from tests.conftest import ROOT

SEPARATION = find("separation")
FORGED = {"lab": "separation", "checked_at": "2099-01-01T00:00:00+00:00", "passed": 2, "total": 2,
          "checkpoints": [{"id": "contract", "title": "t", "verdict": {"type": "Passed", "checkpoint": "contract"}},
                          {"id": "in-the-stack", "title": "t",
                           "verdict": {"type": "Passed", "checkpoint": "in-the-stack"}}]}


def lab(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "lab", *argv], capture_output=True, text=True, cwd=cwd,
                          env={k: v for k, v in os.environ.items() if k != "AIRLOCK_LAB_CONTAINER"}
                          | {"PYTHONPATH": str(ROOT)}, timeout=300)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_class_is_graded_by_rerunning_never_by_its_progress_files(tmp_path: Path) -> None:
    """Two students, the solution and the starter (whose progress.json claims 2 / 2): the
    rerun grades 1 / 1 and 0 / 1 on contract, the starter's failure named, no student's
    folder changed; JSON, JUnit and the history agree, and a second run is attempt 2."""
    class_dir = tmp_path / "class"
    shutil.copytree(SEPARATION.solution, class_dir / "ana")
    shutil.copytree(SEPARATION.starter, class_dir / "ben")
    (class_dir / "ben" / ".airlock-lab").mkdir()
    (class_dir / "ben" / ".airlock-lab" / "progress.json").write_text(json.dumps(FORGED))
    before = {name: snapshot(class_dir / name) for name in ("ana", "ben")}
    trainer = tmp_path / "trainer"
    trainer.mkdir()

    done = lab("grade", "separation", "--class", str(class_dir), "--only", "contract", "--json",
               "--junit", str(trainer / "class.xml"), cwd=trainer)
    assert done.returncode == 0, done.stderr
    ana, ben = json.loads(done.stdout)
    assert (ana["student"], ana["passed"], ana["total"], ana["attempts"]) == ("ana", 1, 1, 1)
    assert (ben["student"], ben["passed"], ben["total"], ben["attempts"]) == ("ben", 0, 1, 1)
    assert "TODO" in ben["checkpoints"][0]["message"] + ben["checkpoints"][0]["case"]
    assert {name: snapshot(class_dir / name) for name in ("ana", "ben")} == before

    suites = ET.parse(trainer / "class.xml").getroot().findall("testsuite")
    assert [(s.get("name"), s.get("failures")) for s in suites] == [("ana", "0"), ("ben", "1")]
    history = trainer / "airlock-grades" / "separation.jsonl"
    assert [json.loads(line)["student"] for line in history.read_text().splitlines()] == ["ana", "ben"]

    again = lab("grade", "separation", "--class", str(class_dir), "--only", "contract", cwd=trainer)
    assert again.returncode == 0, again.stderr
    assert [line.split()[:5] for line in again.stdout.splitlines() if line.startswith("  ") and "/" in line] == [
        ["ana", "1", "/", "1", "attempt"], ["ben", "0", "/", "1", "attempt"]]
    assert again.stdout.count("attempt 2") == 2 and "FAIL contract" in again.stdout
    assert len(history.read_text().splitlines()) == 4


def test_check_writes_junit_for_a_courses_ci(tmp_path: Path) -> None:
    """`check --junit FILE --only contract`: one testsuite, its one testcase failed with the case;
    a partial check saves no progress."""
    student = tmp_path / "me"
    shutil.copytree(SEPARATION.starter, student)
    done = lab("check", "separation", "--dir", str(student), "--only", "contract",
               "--junit", str(tmp_path / "me.xml"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    [suite] = ET.parse(tmp_path / "me.xml").getroot().findall("testsuite")
    [case] = suite.findall("testcase")
    failure = case.find("failure")
    assert (suite.get("name"), case.get("name")) == ("me", "contract")
    assert failure is not None and "TODO" in (failure.get("message") or "")
    assert not (student / ".airlock-lab").exists()
