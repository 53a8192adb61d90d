"""Lab preconditions (seed 004): its graders judge the starter, the reference and every
deliberately wrong solution as lab.toml says, and the pipeline checkpoint grades what the
actor's real executor did with the student's code in its place."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lab.grading import Failed, Passed, Verdict

LAB = Path(__file__).resolve().parents[2] / "labs" / "preconditions"
SPEC = tomllib.loads((LAB / "lab.toml").read_text(encoding="utf-8"))
CHECKPOINTS = [c["id"] for c in SPEC["checkpoints"]]
WRONG = sorted(p.name for p in (LAB / "wrong").iterdir())
# The case each wrong solution must be caught on, in the student's terms.
WRONG_CASE = {
    "evidence-copied-from-the-email-body":
        "the sender's address copied from the email body (lineage email, not intake)",
    "corroboration-both-copied-from-the-email": "two fields that agree but were both copied from the email",
    "approval-claiming-the-support-lead-role": "sam (a support-agent) approves, claiming the support-lead role",
    "decide-corroboration-never-runs":
        "the sender copied from the email: evidence refuses first, corroboration never runs",
}


def grade(checkpoint: str, student_dir: Path) -> Verdict:
    grader = next(c["grader"] for c in SPEC["checkpoints"] if c["id"] == checkpoint)
    module, function = grader.split(":")
    return getattr(importlib.import_module(module), function)(student_dir)


def student(tmp_path: Path, replace: dict[str, str] | None = None, append: str = "") -> Path:
    """A student's folder holding the reference with some lines replaced or appended."""
    text = (LAB / "solution" / "preconditions.py").read_text(encoding="utf-8")
    for old, new in (replace or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (tmp_path / "preconditions.py").write_text(text + append, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("checkpoint", CHECKPOINTS)
def test_the_starter_fails_each_checkpoint_with_its_todo_message(checkpoint: str) -> None:
    """Every starter function is a TODO, and each checkpoint says which one to write."""
    verdict = grade(checkpoint, LAB / "starter")
    assert isinstance(verdict, Failed) and verdict.checkpoint == checkpoint
    assert "is still a TODO" in verdict.message


@pytest.mark.parametrize("checkpoint", CHECKPOINTS)
def test_the_reference_solution_passes_each_checkpoint(checkpoint: str) -> None:
    """The reference passes every checkpoint, hidden cases and the pipeline included."""
    assert grade(checkpoint, LAB / "solution") == Passed(checkpoint)


def test_every_wrong_solution_is_listed_here() -> None:
    """A wrong/ folder added without its expected case would go unchecked."""
    assert set(WRONG) == set(WRONG_CASE)


@pytest.mark.parametrize("wrong", WRONG)
def test_a_wrong_solution_fails_its_checkpoint_only_naming_the_case(wrong: str) -> None:
    """wrong/<checkpoint>-<what>/ fails that checkpoint, on its named case, and passes the others."""
    own = max((c for c in CHECKPOINTS if wrong.startswith(c + "-")), key=len)
    verdicts = {c: grade(c, LAB / "wrong" / wrong) for c in CHECKPOINTS}
    assert {c for c, v in verdicts.items() if isinstance(v, Failed)} == {own}
    failed = verdicts[own]
    assert isinstance(failed, Failed) and failed.case == WRONG_CASE[wrong] and failed.message
    assert wrong.removeprefix(own + "-").replace("-", " ") in failed.case.replace("-", " ").lower()  # <what> names it
    assert "TODO" not in failed.message


def test_only_the_rule_passes_hidden_cases_not_the_visible_examples(tmp_path: Path) -> None:
    """Corroboration that hard-codes the visible examples' two sources, not min_sources, is caught by a hidden case."""
    cheat = student(tmp_path, {"    if best >= pre.min_sources:": "    if best >= 2:"})
    verdict = grade("corroboration", cheat)
    assert isinstance(verdict, Failed) and verdict.case.startswith("hidden case: ")
    assert grade("corroboration", cheat) == verdict  # derandomized: the same case every run


def test_the_pipeline_fails_a_guard_that_lets_the_data_only_attack_through(tmp_path: Path) -> None:
    """A decide that allows everything sends mail/send_status for somebody else's order: caught from calls.jsonl."""
    verdict = grade("pipeline", student(tmp_path, append="\n\ndef decide(*args):\n    return Verdict()\n"))
    assert isinstance(verdict, Failed) and verdict.case.startswith("data-only-")
    assert "somebody else's order" in verdict.message


def test_the_pipeline_fails_a_guard_that_refuses_everything(tmp_path: Path) -> None:
    """Refusing every call by corroboration stops the attacks but loses the honest customers."""
    always = ("\n\ndef decide(*args):\n    return Verdict('refuse', 'no', rules=[RuleResult('corroboration', 'refuse',"
              " 'no')])\n")
    verdict = grade("pipeline", student(tmp_path, append=always))
    assert isinstance(verdict, Failed) and "asks about their own order" in verdict.case


def test_a_rule_that_raises_is_a_failed_case_not_a_crashed_grader(tmp_path: Path) -> None:
    """evidence indexing a missing fact fails with the case and the exception named."""
    crashing = student(tmp_path, {"        fact = facts.get(name)\n        if fact is None or":
                                  "        fact = facts[name]\n        if fact is None or"})
    verdict = grade("evidence", crashing)
    assert isinstance(verdict, Failed) and verdict.case == "no sender at all"
    assert "raised KeyError" in verdict.message and "never raises" in verdict.message


@pytest.mark.parametrize("content", ["", "def evidence(:\n"], ids=["missing", "syntax-error"])
def test_a_missing_or_broken_file_is_a_failed_checkpoint(tmp_path: Path, content: str) -> None:
    """No preconditions.py, or one that does not import, fails every checkpoint with the reason."""
    if content:
        (tmp_path / "preconditions.py").write_text(content)
    for checkpoint in CHECKPOINTS:
        verdict = grade(checkpoint, tmp_path)
        assert isinstance(verdict, Failed) and "preconditions.py" in verdict.message + verdict.case


def test_a_student_function_that_exits_or_returns_junk_is_a_failed_case(tmp_path: Path) -> None:
    """sys.exit() in a rule, or a Verdict whose record holds junk, fails the case; the grader goes on."""
    exits = student(tmp_path, append="\n\ndef evidence(*args):\n    raise SystemExit(3)\n")
    verdict = grade("evidence", exits)
    assert isinstance(verdict, Failed) and "raised SystemExit" in verdict.message
    junk = tmp_path / "junk"
    junk.mkdir()
    student(junk, append="\n\ndef decide(*args):\n    return Verdict('allow', rules=[1])\n")
    verdict = grade("decide", junk)
    assert isinstance(verdict, Failed) and "cannot read" in verdict.message


def test_hidden_cases_are_the_same_in_every_process(tmp_path: Path) -> None:
    """Two grading processes with different hash seeds try the same hidden cases in the same order."""
    log = tmp_path / "seen"
    recording = student(tmp_path, {
        "    read = {name: _shown(facts.get(name)) for name in pre.corroborate}\n    lineages":
        "    with open(os.environ['SEEN'], 'a') as seen:\n        print(repr(pre), repr(facts), file=seen)\n"
        "    read = {name: _shown(facts.get(name)) for name in pre.corroborate}\n    lineages"},
        append="\nimport os\n")
    script = ("import sys; from pathlib import Path; from lab.graders.preconditions import corroboration; "
              "print(corroboration(Path(sys.argv[1])))")
    root = Path(__file__).resolve().parents[2]
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "SEEN": f"{log}{seed}"}
        done = subprocess.run([sys.executable, "-c", script, str(recording)], capture_output=True, text=True,
                              check=True, cwd=root, env=env)
        assert done.stdout.strip() == "Passed(checkpoint='corroboration')"
    first, second = (Path(f"{log}{seed}").read_text() for seed in ("1", "2"))
    assert first.count("\n") > 100 and first == second
