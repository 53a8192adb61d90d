"""Lab executor-checks (seed 003): what its graders do beyond the starter, reference and
wrong solutions tests/labs/test_labs.py grades for every lab: hidden cases, a tool that
hangs, and whatever else a student writes."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from course import catalog
from course.grading import Failed
from tests.labs.support import grade_in_process, solution_with

LAB = catalog.find("executor-checks")
grade = functools.partial(grade_in_process, LAB)
student = functools.partial(solution_with, LAB)


def test_only_the_rule_passes_hidden_cases_not_the_visible_examples(tmp_path: Path) -> None:
    """A schema check that rejects bool only for the visible examples' names is caught by a hidden case."""
    cheat = student(tmp_path, {'''    if isinstance(value, bool):
        return False
    if wanted == "int":''': '''    if wanted == "int":'''})
    text = (cheat / "checks.py").read_text()
    text = text.replace('''        if not _has_type(args[name], spec["type"]):''',
                        '''        if name in ("quantity", "price") and isinstance(args[name], bool):
            return Error("schema", "bool")
        if not _has_type(args[name], spec["type"]):''')
    (cheat / "checks.py").write_text(text)
    verdict = grade("schema", cheat)
    assert isinstance(verdict, Failed) and verdict.case.startswith("hidden case: ")
    assert grade("schema", cheat) == verdict  # derandomized: the same case every run


def test_a_student_function_that_raises_is_a_failed_case_not_a_crashed_grader(tmp_path: Path) -> None:
    """allowlist_problem indexing a list as a dict fails with the case and the exception named."""
    crashing = student(tmp_path, {'''    if not isinstance(call, dict):
        return Error("not_allowed", f"a call is a JSON object, not {type(call).__name__}")
''': ""})
    verdict = grade("allowlist", crashing)
    assert isinstance(verdict, Failed)
    assert verdict.case == "a list ['shop', 'lookup_order'] instead of an object"
    assert "raised" in verdict.message and "never raises" in verdict.message


def test_a_tool_that_hangs_is_a_timeout_and_run_tool_may_not_wait_for_it(tmp_path: Path) -> None:
    """A run_tool that waits for a slow tool fails the execution checkpoint, and the grader returns."""
    waiting = student(tmp_path, {"    worker.join(timeout_s)\n": "    worker.join()\n"})
    start = time.monotonic()
    verdict = grade("execution", waiting)
    assert time.monotonic() - start < 10
    assert isinstance(verdict, Failed) and verdict.case == "a tool that hangs (5 s) with timeout_s=0.25"


def test_a_student_function_that_exits_or_returns_junk_is_a_failed_case(tmp_path: Path) -> None:
    """sys.exit() in a check, or an object that breaks when read (so it cannot come back as
    data), fails the case it was returned on; the grader goes on."""
    exits = student(tmp_path, {'''    if not isinstance(args, dict):
        return Error("schema", f"arguments are a JSON object, not {type(args).__name__}")''':
                                '''    raise SystemExit(3)'''})
    verdict = grade("schema", exits)
    assert isinstance(verdict, Failed) and "raised SystemExit" in verdict.message
    junk = tmp_path / "junk"
    junk.mkdir()
    student(junk, {'''        return Error("not_allowed", f"{server!r}/{tool!r} is not in the allowlist")''':
                   '''        class Junk:
            @property
            def kind(self):
                raise RuntimeError("boom")
        Junk.__name__ = "Error"
        return Junk()'''})
    verdict = grade("allowlist", junk)
    assert isinstance(verdict, Failed) and "not plain data" in verdict.message
    assert verdict.case == "mail/lookup_order: the allowed tool's name on another server"


def test_an_execute_that_calls_the_tool_itself_loses_the_timeout_and_the_cap(tmp_path: Path) -> None:
    """execute() that runs tool['run'] directly (catching its errors) fails on the slow tool:
    run_tool is the boundary."""
    direct = student(tmp_path, {'''    return run_tool(tool["run"], args, tool["timeout_s"], max_result_bytes)''':
                                '''    try:
        return Ok(tool["run"](args))
    except Exception as exc:
        return Error("tool_error", str(exc))'''})
    verdict = grade("execute", direct)
    assert isinstance(verdict, Failed) and verdict.case == "shop/slow, which answers after its timeout_s of 0.25 s"
