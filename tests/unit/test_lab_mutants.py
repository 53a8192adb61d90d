"""`airlock lab mutants` without running a grader: the equivalents file, the annotation
filter, the mutants cosmic-ray makes, the score and the report."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from airlock.errors import EX_CONFIG
from cli import lab as commands
from course import catalog, mutants
from course.catalog import LabFormatError
from course.mutants import Equivalent, LabScore, Mutant, MutantsFileError

STUDENT_FILES = ["checks.py"]
ENTRY = '''[[equivalent]]
file = "checks.py"
definition = "limited"
operator = "core/ReplaceComparisonOperator_Lt_LtE"
before = "  if len(text) < LIMIT:  "
after = "if len(text) <= LIMIT:"
why = "text is never exactly LIMIT long"
'''


def mutant(**fields: object) -> Mutant:
    base: dict[str, object] = {"file": "checks.py", "line": 7, "definition": "limited",
                               "operator": "core/ReplaceComparisonOperator_Lt_LtE",
                               "before": "if len(text) < LIMIT:", "after": "if len(text) <= LIMIT:"}
    return Mutant(**(base | fields))  # type: ignore[arg-type]


def result(**fields: object) -> LabScore:
    base: dict[str, object] = {"lab": "demo", "checkpoints": ["one"], "left_out": ["in-the-stack"], "in_stack": [],
                               "total": 30,
                               "annotation": 8, "equivalent": 2, "run": 20, "killed": 19, "timeouts": 1,
                               "survivors": [mutant()], "stale": []}
    return LabScore(**(base | fields))  # type: ignore[arg-type]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mutants.toml"
    path.write_text(text)
    return path


def test_an_entry_is_read_and_matches_its_mutant_whatever_the_indentation(tmp_path: Path) -> None:
    """A recorded entry decodes, and matches the mutant with the same keys, lines compared stripped."""
    (entry,) = mutants.load_equivalents(write(tmp_path, ENTRY), STUDENT_FILES)
    assert entry.why == "text is never exactly LIMIT long"
    assert mutants.matches(entry, mutant())


def test_a_line_number_is_not_part_of_the_identity(tmp_path: Path) -> None:
    """An edit above the mutant moves its line; the entry still matches."""
    (entry,) = mutants.load_equivalents(write(tmp_path, ENTRY), STUDENT_FILES)
    assert mutants.matches(entry, mutant(line=99))


@pytest.mark.parametrize("other", [{"definition": "other"}, {"definition": ""}, {"file": "x.py"},
                                   {"operator": "core/ReplaceComparisonOperator_Lt_Gt"},
                                   {"after": "if len(text) > LIMIT:"}, {"before": "if len(text) < 2:"}])
def test_an_entry_matches_no_other_mutant(tmp_path: Path, other: dict[str, object]) -> None:
    """A different file, definition, operator or change is another mutant."""
    (entry,) = mutants.load_equivalents(write(tmp_path, ENTRY), STUDENT_FILES)
    assert not mutants.matches(entry, mutant(**other))


def test_no_file_is_no_equivalent(tmp_path: Path) -> None:
    """A lab without mutants.toml has recorded none."""
    assert mutants.load_equivalents(tmp_path / "mutants.toml", STUDENT_FILES) == []


@pytest.mark.parametrize(("text", "says"), [
    (ENTRY.replace("why =", "reason ="), "reason"),
    (ENTRY.replace('why = "text is never exactly LIMIT long"', 'why = "  "'), "equivalent[0].why"),
    (ENTRY.replace('file = "checks.py"', 'file = "other.py"'), "equivalent[0].file"),
    (ENTRY.replace('why = "text is never exactly LIMIT long"', 'why = "TODO: why"'), "still a TODO"),
    (ENTRY.replace('before = "  if len(text) < LIMIT:  "', "before = 3"), "equivalent[0].before"),
    ("[[equivalent]\n", "not valid TOML"),
    ("[equivalent]\nfile = 'checks.py'\n", "equivalent"),
])
def test_a_bad_file_is_a_typed_error_naming_file_and_key(tmp_path: Path, text: str, says: str) -> None:
    """An unknown key, an empty or TODO why, a file not the student's, a wrong type or bad TOML is a
    MutantsFileError (a LabFormatError: exit 78) naming the file and the key."""
    path = write(tmp_path, text)
    with pytest.raises(MutantsFileError) as raised:
        mutants.load_equivalents(path, STUDENT_FILES)
    assert isinstance(raised.value, LabFormatError)
    assert str(path) in str(raised.value) and says in str(raised.value)


ANNOTATED = '''from __future__ import annotations

LIMIT: int | None = 3


def f(x: int | None, *rest: str | bytes, **named: dict[str, int | None]) -> int | None:
    return x | 1
'''


def test_annotations_are_found_only_under_the_future_import() -> None:
    """Every annotation (argument, *rest, **named, return, variable) is a span under the
    future import, and none without it, where an annotation is evaluated at definition time."""
    spans = mutants.annotation_spans(ANNOTATED)
    assert len(spans) == 5
    assert mutants.annotation_spans(ANNOTATED.replace("from __future__ import annotations\n", "")) == []


def test_the_filter_takes_annotation_mutants_and_leaves_code_ones() -> None:
    """A `|` inside an annotation is filtered; the `|` of `x | 1` in the body is not."""
    spans = mutants.annotation_spans(ANNOTATED)
    line = ANNOTATED.splitlines().index("    return x | 1") + 1
    signature = ANNOTATED.splitlines().index(next(t for t in ANNOTATED.splitlines() if t.startswith("def f"))) + 1
    bar = ANNOTATED.splitlines()[signature - 1].index("|")
    assert mutants.in_annotation((signature, bar), (signature, bar + 1), spans)
    assert not mutants.in_annotation((line, 13), (line, 14), spans)


def test_columns_are_counted_in_characters_as_parso_does() -> None:
    """A non-ASCII character before an annotation moves ast's byte offset, not parso's column."""
    source = 'from __future__ import annotations\n\ndef f(ä: int, b: str | None) -> None: ...\n'
    spans = mutants.annotation_spans(source)
    column = source.splitlines()[2].index("str")
    assert ((3, column), (3, column + len("str | None"))) in spans


def test_the_changed_lines_are_what_differs() -> None:
    """The mutant's before and after are the changed lines, stripped; the rest is left out."""
    assert mutants.changed_lines("a = 1\n    if x < 2:\n        b\n", "a = 1\n    if x <= 2:\n        b\n") == (
        "if x < 2:", "if x <= 2:")


def test_comments_are_not_part_of_a_change() -> None:
    """A comment on the changed line is left out (rewording it keeps an entry matching); a
    '#' inside a string is code, and stays."""
    assert mutants.changed_lines('x = "#a" < 2  # note\n', 'x = "#a" <= 2  # note\n') == (
        'x = "#a" < 2', 'x = "#a" <= 2')


def test_cosmic_ray_mutants_of_a_solution_carry_where_and_what() -> None:
    """The separation lab's solution yields mutants with file, line, definition, operator and a
    one-line change, each compiling, in a stable order (no subprocess: cosmic-ray's init and
    mutate_code only)."""
    solution = [catalog.find("separation").solution / "checker.py"]
    made = mutants.make_mutants(solution)
    assert made == mutants.make_mutants(solution)
    assert made and all(m.file == "checker.py" and m.code and m.before != m.after for m in made)
    assert {m.definition for m in made} == {"check"}
    for m in made:
        compile(m.code, m.file, "exec")


def test_mutants_inside_annotations_are_flagged_and_the_others_not(tmp_path: Path) -> None:
    """Under the future import the `|`s of the signature make flagged mutants; the `|` of
    `x | 1` and the value 3 of an annotated variable make unflagged ones (cosmic-ray itself
    leaves a variable annotation's `|` alone); without the import none is flagged."""
    path = tmp_path / "annotated.py"
    path.write_text(ANNOTATED)
    made = mutants.make_mutants([path])
    assert {m.line for m in made if m.annotation} == {6}
    assert {m.line for m in made if not m.annotation} == {3, 7}
    path.write_text(ANNOTATED.replace("from __future__ import annotations\n", ""))
    assert not any(m.annotation for m in mutants.make_mutants([path]))


@pytest.mark.parametrize(("killed", "run", "expected"), [(19, 20, 0.95), (0, 4, 0.0), (0, 0, 1.0), (7, 7, 1.0)])
def test_score_is_killed_over_graded(killed: int, run: int, expected: float) -> None:
    """killed / (total - annotation - equivalent); nothing to kill is a full score."""
    assert mutants.score(killed, run) == pytest.approx(expected)


def test_passing_needs_the_target_no_stale_entry_and_no_error() -> None:
    """95% passes; under it, a stale equivalent entry or a failing solution does not."""
    assert result().passed
    assert not result(killed=18).passed
    assert not result(stale=[Equivalent("checks.py", "op", "a", "b", "why")]).passed
    assert not result(killed=20, survivors=[], error="the solution itself fails one").passed


def test_the_report_names_counts_checkpoints_and_each_survivor() -> None:
    """The report says the score, each count, the annotation filter, the time limit rule,
    the checkpoints that ran and left out, and each survivor as file:line definition operator diff."""
    lines = mutants.report_lines(result())
    text = "\n".join(lines)
    assert lines[0].startswith("demo: score 95.0% (ok")
    for words in ("mutants 30", "annotation-only 8", "from __future__ import annotations", "equivalent 2",
                  "killed 19 (1 by the time limit", "survived 1", "checkpoints run: one",
                  "left out (each starts a private stack): in-the-stack",
                  "survivor checks.py:7 limited core/ReplaceComparisonOperator_Lt_LtE  "
                  "if len(text) < LIMIT:  ->  if len(text) <= LIMIT:"):
        assert words in text
    failing = "\n".join(mutants.report_lines(result(killed=10, sampled=True,
                                                     stale=[Equivalent("checks.py", "op", "a", "b", "w")])))
    assert "FAIL: under the target" in failing and "a sample of 20" in failing and "stale equivalent" in failing
    assert "FAIL: a stale equivalent entry" in mutants.report_lines(
        result(stale=[Equivalent("checks.py", "op", "a", "b", "w")]))[0]
    stacked = "\n".join(mutants.report_lines(result(checkpoints=["attack"], left_out=[], in_stack=["attack"])))
    assert "checkpoints run: attack; each in its own private stack (the lab has no other): attack" in stacked


def test_the_json_record_and_the_table_hold_the_same_numbers() -> None:
    """--json's record is plain data (no mutated code) and the docs/labs.md table row agrees with it."""
    record = mutants.record(result())
    assert msgspec.json.decode(msgspec.json.encode(record))["survivors"][0]["definition"] == "limited"
    assert "code" not in record["survivors"][0]  # type: ignore[index]
    assert (record["total"], record["killed"], record["survived"], record["score"]) == (30, 19, 1, 0.95)
    assert mutants.table_lines([result()])[-1] == "| demo | 30 | 8 | 2 | 19 | 1 | 95.0% |"


def test_a_sample_is_the_same_for_the_same_seed_and_differs_by_lab() -> None:
    """--sample picks the same mutants for a seed and lab, a subset, in the original order."""
    made = [mutant(line=i) for i in range(40)]
    first = mutants.sample(made, 15, 7, "demo")
    assert first == mutants.sample(made, 15, 7, "demo") and len(first) == 15
    assert first == sorted(first, key=lambda m: m.line)
    assert first != mutants.sample(made, 15, 7, "other") and first != mutants.sample(made, 15, 8, "demo")
    assert mutants.sample(made, None, 0, "demo") == made and mutants.sample(made, 99, 0, "demo") == made


def test_the_command_stops_on_a_bad_equivalents_file_with_exit_78(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broken labs/<id>/mutants.toml is a configuration error (78) naming the file, raised
    before any mutant is graded."""
    labs = tmp_path / "labs"
    shutil.copytree(catalog.find("separation").folder, labs / "separation")
    (labs / "separation" / "mutants.toml").write_text(ENTRY.replace('"checks.py"', '"checker.py"') + "extra = 1\n")
    assert commands.main(["--labs-root", str(labs), "mutants", "separation"]) == EX_CONFIG
    assert "mutants.toml" in capsys.readouterr().err


def test_partition_grades_the_rest_and_names_stale_entries() -> None:
    """A matching entry takes its mutant out of the graded ones; an entry that matches no
    mutant, or only an annotation-only one, is stale; annotation mutants are graded never."""
    kept, recorded, annotated = mutant(line=1), mutant(line=2, after="if len(text) > LIMIT:"), mutant(
        line=3, before="def f(x: A | None):", after="def f(x: A & None):", annotation=True)
    entry = Equivalent("checks.py", kept.operator, "if len(text) < LIMIT:", "if len(text) > LIMIT:", "why",
                       definition="limited")
    on_annotation = Equivalent("checks.py", kept.operator, annotated.before, annotated.after, "why", "limited")
    gone = Equivalent("checks.py", kept.operator, "if x:", "if not x:", "why", "limited")
    graded, equivalent, stale = mutants.partition([kept, recorded, annotated], [entry, on_annotation, gone])
    assert (graded, equivalent, stale) == ([kept], [recorded], [on_annotation, gone])
