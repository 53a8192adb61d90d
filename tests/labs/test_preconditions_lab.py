"""Lab preconditions (seed 004): what its graders do beyond the starter, reference and
wrong solutions tests/labs/test_labs.py grades for every lab: hidden cases, and the
pipeline checkpoint, which grades what the actor's real executor did with the student's
code in its place."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from course import catalog
from course.grading import Failed, Passed
from tests.labs.support import grade_in_process, solution_with

LAB = catalog.find("preconditions")
grade = functools.partial(grade_in_process, LAB)
student = functools.partial(solution_with, LAB)


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
    folder = student(tmp_path)
    # Recorded on the grader's side, where the cases are drawn: the student's process may not write outside its own.
    script = ("import sys; from pathlib import Path; import course.graders.preconditions as graders\n"
              "seen, problem = open(sys.argv[2], 'w'), graders._rule_problem\n"
              "def recorded(function, fn, oracle, case):\n"
              "    print(repr(case[1]), repr(case[2]), file=seen)\n"
              "    return problem(function, fn, oracle, case)\n"
              "graders._rule_problem = recorded\n"
              "print(graders.corroboration(Path(sys.argv[1])))\n")
    root = Path(__file__).resolve().parents[2]
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script, str(folder), f"{log}{seed}"], capture_output=True,
                              text=True, check=True, cwd=root, env=env)
        assert done.stdout.strip() == "Passed(checkpoint='corroboration')"
    first, second = (Path(f"{log}{seed}").read_text() for seed in ("1", "2"))
    assert first.count("\n") > 100 and first == second


def test_the_pipeline_fails_a_decide_that_returns_a_bare_string(tmp_path: Path) -> None:
    """decide returning 'allow' instead of a Verdict is a failed call in the executor, named, never a crashed grader."""
    verdict = grade("pipeline", student(tmp_path, append="\n\ndef decide(*args):\n    return 'allow'\n"))
    assert isinstance(verdict, Failed) and verdict.case == "a call in the executor"
    assert "not an actor.preconditions.Verdict" in verdict.message


def test_decide_is_judged_with_the_reference_rules_while_the_students_are_todo(tmp_path: Path) -> None:
    """The starter's TODO rules with the reference's decide: decide passes, since the reference's rules stand in."""
    solution = (LAB.solution / "preconditions.py").read_text(encoding="utf-8")
    starter = (LAB.starter / "preconditions.py").read_text(encoding="utf-8")
    decide_source = solution[solution.index("def decide("):]
    (tmp_path / "preconditions.py").write_text(starter[:starter.index("def decide(")] + decide_source,
                                               encoding="utf-8")
    assert grade("decide", tmp_path) == Passed("decide")
    assert isinstance(grade("evidence", tmp_path), Failed)
