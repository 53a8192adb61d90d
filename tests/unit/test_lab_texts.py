"""What every lab's own texts and files promise: the instructor notes and the lessons count
the lab's checkpoints as lab.toml does, and no starter or solution imports the module whose
functions are the student's answer.

Read as text and syntax only (ast), never imported: a starter that imports its answer must
be found without running it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from course.catalog import Lab, load_all
from tests.conftest import ROOT

LABS = load_all()

# "checkpoints N / 2", "`3 / 6`", "sees 1 / 3": a count of checkpoints as the check prints it
COUNT = re.compile(r"(?<![\w/])(?:\d+|[NM]) ?/ ?(\d+)(?![\w/])")


def counts_in(text: str) -> list[str]:
    """Every "X / Y" in a text, as written; Y is the total a reader will expect."""
    return [match.group(0) for match in COUNT.finditer(text)]


def wrong_counts(text: str, total: int) -> list[str]:
    return [count for count in counts_in(text) if int(COUNT.fullmatch(count).group(1)) != total]  # type: ignore[union-attr]


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_instructor_notes_count_the_labs_checkpoints(lab: Lab) -> None:
    """Every "N / M" in a lab's instructor notes has M = the lab's number of checkpoints."""
    notes = "\n".join([lab.instructor.reading_the_report, *lab.instructor.mistakes,
                       *(hint.text for hint in lab.hints)])
    assert wrong_counts(notes, len(lab.checkpoints)) == []


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_lessons_count_the_labs_checkpoints(lab: Lab) -> None:
    """Every "N / M" in a lab's lessons (README.md and each translation) has M = its checkpoints."""
    lessons = sorted(lab.folder.glob("README*.md"))
    assert lessons
    assert {path.name: wrong_counts(path.read_text(encoding="utf-8"), len(lab.checkpoints))
            for path in lessons} == {path.name: [] for path in lessons}


def test_the_count_reader_sees_every_form_a_lesson_uses() -> None:
    """The reader finds the forms the labs write, and skips dates, paths and hint levels."""
    assert counts_in('prints "checkpoints N / 2", `3 / 6` style; sees 1 / 3, 2/3') == [
        "N / 2", "3 / 6", "1 / 3", "2/3"]
    assert counts_in("levels 1 to 3, labs/separation/README.md, 2026/12/03, a/b") == []
    assert wrong_counts("checkpoints N / 2 and 1 / 3", 3) == ["N / 2"]


# --- a starter never imports its answer ---------------------------------------------------


def todo_functions(path: Path) -> set[str]:
    """The functions a starter file leaves to the student: each whose body raises
    NotImplementedError (the labs' TODO)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                isinstance(inner, ast.Raise) and inner.exc is not None
                and "NotImplementedError" in ast.unparse(inner.exc) for inner in ast.walk(node))}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, by its dotted name (`from a.b import c` names a.b and a.b.c:
    c may be a module)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def source_of(module: str) -> Path | None:
    """The checkout's file for a dotted module name; None for the stdlib and third parties."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def defined_functions(path: Path) -> set[str]:
    """Every function a module defines, at any depth: a method or a nested function that is
    the answer is the answer all the same (approval_rule's approval in actor.preconditions)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def answers_imported(lab: Lab, folder: Path) -> list[str]:
    """"file imports module, which defines f" for each student function f a module imported
    by the lab's files in folder defines."""
    todo = set().union(*(todo_functions(lab.starter / name) for name in lab.student_files))
    found = []
    for name in lab.student_files:
        for module in sorted(imported_modules(folder / name)):
            source = source_of(module)
            for function in sorted(defined_functions(source) & todo if source else set()):
                found.append(f"{folder.name}/{name} imports {module}, which defines {function}")
    return found


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_no_starter_or_solution_imports_the_module_that_holds_its_answer(lab: Lab) -> None:
    """A lab's starter and solution import no module of the checkout that defines a function
    the student must write (the student could call it instead of writing it)."""
    assert todo_functions(lab.starter / lab.student_files[0])
    assert answers_imported(lab, lab.starter) == []
    assert answers_imported(lab, lab.solution) == []


def test_an_import_of_the_answer_is_found(tmp_path: Path) -> None:
    """A starter that imports actor.preconditions (where evidence and corroboration are) is
    named, with each such function."""
    lab = next(lab for lab in LABS if lab.id == "preconditions")
    starter = tmp_path / "starter"
    starter.mkdir()
    text = (lab.starter / "preconditions.py").read_text(encoding="utf-8")
    (starter / "preconditions.py").write_text(text.replace("from actor.decisions import",
                                                           "from actor.preconditions import"))
    found = answers_imported(lab, starter)
    assert "starter/preconditions.py imports actor.preconditions, which defines evidence" in found
    assert "starter/preconditions.py imports actor.preconditions, which defines corroboration" in found
