"""The graders measured: a fixed sample of cosmic-ray's mutants of each lab's reference
solution, graded by the lab's own checkpoints (`airlock lab mutants --sample 15 --seed 0`),
is killed in full, apart from the equivalents recorded in labs/<id>/mutants.toml, and every
recorded equivalent still matches a mutant."""

from __future__ import annotations

import json

import pytest

from course import catalog, mutants
from course.catalog import Lab
from tests.labs.test_labs import run_lab

LABS = catalog.load_all()
SAMPLE, SEED = 15, 0


@pytest.mark.parametrize("lab", [pytest.param(lab, id=lab.id) for lab in LABS])
def test_every_sampled_mutant_is_killed(lab: Lab) -> None:
    """Each sampled non-equivalent mutant fails some checkpoint (the survivors are listed)."""
    result = mutants.measure(lab, SAMPLE, SEED)
    report = "\n".join(mutants.report_lines(result))
    assert not result.error, report
    assert not result.stale, report
    assert result.run == min(SAMPLE, result.total - result.annotation - result.equivalent)
    assert len(result.survivors) == 0, report


def test_the_command_prints_one_json_object_and_exits_by_the_score(capsys: pytest.CaptureFixture[str]) -> None:
    """`lab mutants separation --sample 3 --json`: one object with the lab's counts, its
    survivors and the checkpoints that ran; exit 0 exactly when the lab passes."""
    code, out, _ = run_lab(capsys, "mutants", "separation", "--sample", "3", "--seed", "1", "--json")
    printed = json.loads(out)
    (lab,) = printed["labs"]
    assert (printed["sample"], printed["seed"], printed["target"]) == (3, 1, mutants.TARGET)
    assert lab["lab"] == "separation" and lab["run"] == 3 and lab["sampled"]
    assert lab["checkpoints"] == ["contract"] and lab["left_out"] == ["in-the-stack"]
    assert lab["killed"] + lab["survived"] == 3 and len(lab["survivors"]) == lab["survived"]
    assert code == (0 if lab["passed"] else 1)


def test_an_unknown_lab_or_a_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown id, --sample 0 and --jobs 0 exit 2 before any mutant is graded."""
    assert run_lab(capsys, "mutants", "no-such-lab")[0] == 2
    assert run_lab(capsys, "mutants", "separation", "--sample", "0")[0] == 2
    assert run_lab(capsys, "mutants", "separation", "--jobs", "0")[0] == 2
