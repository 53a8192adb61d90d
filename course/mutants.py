"""Mutation testing of the labs' reference solutions: a grader is measured, not trusted.

cosmic-ray makes the mutants (its `init` into a work database, then `mutate_code` for each
work item), one small change of one solution file each. Every mutant is copied with the
rest of the solution into a private folder, as a student's folder holds it, and graded by
the lab's own checkpoints through the runner's public `run_checkpoint`, one after the other
until one fails. A mutant is killed when any checkpoint fails it, a time limit included: a
mutant that makes the code loop has changed what it does. A mutant that passes every
checkpoint survived: either a grader misses a real defect, or the mutant is equivalent
(it cannot change what the code does), which a trainer records in labs/<id>/mutants.toml:

    [[equivalent]]
    file = "checks.py"                                   # one of student_files
    definition = "read_limited"                          # the enclosing def or class ("" or
                                                         #   left out: the module's top level)
    operator = "core/ReplaceComparisonOperator_Lt_LtE"   # cosmic-ray's operator name
    before = "if len(text) < LIMIT:"                     # the solution's changed line(s), and
    after = "if len(text) <= LIMIT:"                     #   the mutant's, each stripped
    why = "text is never exactly LIMIT long: read() stops one short of it"   # never a TODO

An entry names its mutant by where and what changed, never by a line number or cosmic-ray's
occurrence index, so an edit elsewhere in the file leaves it matching (the same change of
the same line twice in one definition is one entry for both); an entry that matches no
mutant any more is reported as stale, and so fails like a low score. `airlock lab mutants`
prints each survivor with these keys.

Annotation mutants are filtered out before anything runs: under `from __future__ import
annotations` an annotation is a string nobody evaluates (the solutions' dataclasses only
keep it), so changing `int | None` into `int & None` changes nothing.

Checkpoints that start a private stack (`in-the-stack`, and every checkpoint of a lab
whose [run] is phased) take 20-60 s each; they are left out where the lab has other
checkpoints, and used where it has none. The report names which ran.
"""

from __future__ import annotations

import ast
import difflib
import io
import random
import shutil
import sys
import tempfile
import time
import tokenize
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
from cosmic_ray import plugins
from cosmic_ray.commands.init import init as cosmic_ray_init
from cosmic_ray.mutating import mutate_code
from cosmic_ray.work_db import WorkDB, use_db

from course.catalog import Checkpoint, Lab, LabFormatError
from course.grading import Failed
from course.runner import Limits, run_checkpoint

TARGET = 0.95  # the share of non-equivalent mutants the checkpoints must kill
STACK_CHECKPOINT = "in-the-stack"
TIME_LIMIT_CASE = "time limit"  # the case course.runner names when a checkpoint runs over
MIN_WALL_S = 20.0  # a mutant's checkpoint may take this long at least, however fast the solution is
WALL_FACTOR = 5.0  # ... or this many times what the solution took, on a machine that may be busy
MUTANTS_FILE = "mutants.toml"


class MutantsFileError(LabFormatError):
    """labs/<id>/mutants.toml is not a list of [[equivalent]] entries; the message names the
    file and the key."""


class Equivalent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One recorded equivalent mutant: which one (file, definition, operator, before, after)
    and why."""

    file: str
    operator: str
    before: str
    after: str
    why: str
    definition: str = ""


class _MutantsFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    equivalent: list[Equivalent] = []


class Mutant(msgspec.Struct, frozen=True):
    """One cosmic-ray mutant of a solution file. `before` and `after` are the changed lines,
    each stripped, joined by newlines; `code` is the whole mutated file."""

    file: str
    line: int
    operator: str
    before: str
    after: str
    definition: str = ""  # the enclosing function or class, "" at the module's top level
    annotation: bool = False
    code: str = ""

    @property
    def diff(self) -> str:
        """The change on one line, for a report."""
        return f"{self.before.replace(chr(10), ' / ')}  ->  {self.after.replace(chr(10), ' / ')}"


class Outcome(msgspec.Struct, frozen=True):
    """What the checkpoints did with one mutant: the checkpoint that failed it ("" when it
    survived), and whether that failure was the time limit."""

    mutant: Mutant
    killed_by: str = ""
    timed_out: bool = False


class LabScore(msgspec.Struct, frozen=True):
    lab: str
    checkpoints: list[str]  # the ones that graded each mutant
    left_out: list[str]  # the ones that start a private stack, not run
    in_stack: list[str]  # of those that ran, the ones that start a private stack (a lab with no other)
    total: int  # every mutant cosmic-ray made
    annotation: int  # filtered: annotation-only
    equivalent: int  # recorded in mutants.toml
    run: int  # graded: all the others, or a sample of them
    killed: int
    timeouts: int  # of the killed, those the time limit killed
    survivors: list[Mutant]
    stale: list[Equivalent]
    sampled: bool = False
    seconds: float = 0.0
    error: str = ""  # the solution itself fails a checkpoint: there is nothing to measure

    @property
    def score(self) -> float:
        return score(self.killed, self.run)

    @property
    def passed(self) -> bool:
        return not self.error and not self.stale and self.score >= TARGET


def score(killed: int, run: int) -> float:
    """killed / run, where run = total - annotation - equivalent (or the sample's size);
    1.0 when there is nothing to kill."""
    return killed / run if run else 1.0


# --- the equivalents file ----------------------------------------------------------------

def load_equivalents(path: Path, student_files: list[str]) -> list[Equivalent]:
    """The [[equivalent]] entries of a mutants.toml; none when the file does not exist."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise MutantsFileError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        entries = msgspec.toml.decode(raw, type=_MutantsFile).equivalent
    except msgspec.ValidationError as exc:
        raise MutantsFileError(f"{path}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise MutantsFileError(f"{path}: not valid TOML ({exc})") from exc
    for i, entry in enumerate(entries):
        if entry.file not in student_files:
            raise MutantsFileError(f"{path}: equivalent[{i}].file: {entry.file!r} is none of {student_files}")
        for key in ("operator", "before", "after", "why"):
            if not getattr(entry, key).strip():
                raise MutantsFileError(f"{path}: equivalent[{i}].{key}: is empty")
        if entry.why.strip().upper().startswith("TODO"):
            raise MutantsFileError(f"{path}: equivalent[{i}].why: is still a TODO; say why no input tells "
                                   f"the mutant from the solution, or kill it with a grader case")
    return entries


def _lines(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def matches(entry: Equivalent, mutant: Mutant) -> bool:
    return (entry.file, entry.definition, entry.operator, _lines(entry.before), _lines(entry.after)) == (
        mutant.file, mutant.definition, mutant.operator, mutant.before, mutant.after)


# --- making the mutants ------------------------------------------------------------------


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the annotations are, as (line, column) pairs in characters (parso's, which
    cosmic-ray uses); none unless the file has `from __future__ import annotations`."""
    tree = ast.parse(source)
    future = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                 and any(alias.name == "annotations" for alias in node.names) for node in tree.body)
    if not future:
        return []
    lines = source.splitlines()

    def column(line: int, offset: int) -> int:  # ast counts UTF-8 bytes, parso characters
        return len(lines[line - 1].encode()[:offset].decode(errors="replace"))

    spans = []
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     *(a for a in (arguments.vararg, arguments.kwarg) if a is not None)]
            annotations = [a.annotation for a in every] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for annotation in annotations:
            if annotation is not None and annotation.end_lineno is not None and annotation.end_col_offset is not None:
                spans.append(((annotation.lineno, column(annotation.lineno, annotation.col_offset)),
                              (annotation.end_lineno, column(annotation.end_lineno, annotation.end_col_offset))))
    return spans


def in_annotation(start: tuple[int, int], end: tuple[int, int],
                  spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
    return any(low <= start and end <= high for low, high in spans)


def without_comments(source: str) -> str:
    """The source with its comments blanked, lines kept: an entry of mutants.toml must not
    go stale when a comment on its line is reworded."""
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:  # a comment runs to the end of its line
            row, column = token.start
            lines[row - 1] = lines[row - 1][:column]
    return "\n".join(lines)


def changed_lines(source: str, mutated: str) -> tuple[str, str]:
    """The lines the mutation changed, before and after, each stripped, comments left out."""
    old, new = without_comments(source).splitlines(), without_comments(mutated).splitlines()
    before: list[str] = []
    after: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            before += old[i1:i2]
            after += new[j1:j2]
    return _lines("\n".join(before)), _lines("\n".join(after))


def make_mutants(paths: list[Path]) -> list[Mutant]:
    """Every mutant cosmic-ray's operators make of these files (a lab's solution), in a
    stable order: file, line, then cosmic-ray's operator order."""
    paths = [path.resolve() for path in paths]
    with tempfile.TemporaryDirectory(prefix="airlock-mutants-") as scratch:
        with use_db(str(Path(scratch) / "session.sqlite"), WorkDB.Mode.create) as db:
            cosmic_ray_init(paths, db, {})
            items = db.work_items
    sources = {path: path.read_text(encoding="utf-8") for path in paths}
    spans = {path: annotation_spans(source) for path, source in sources.items()}
    mutants = []
    for item in items:
        (spec,) = item.mutations
        path = Path(spec.module_path)
        code = mutate_code(sources[path], plugins.get_operator(spec.operator_name)(), spec.occurrence)
        if code is None:
            continue  # cosmic-ray found nothing to change at this occurrence
        before, after = changed_lines(sources[path], code)
        mutants.append(Mutant(file=path.name, line=spec.start_pos[0], operator=spec.operator_name,
                              before=before, after=after, code=code, definition=spec.definition_name or "",
                              annotation=in_annotation(tuple(spec.start_pos), tuple(spec.end_pos), spans[path])))
    order = {name: i for i, name in enumerate(plugins.operator_names())}
    return sorted(mutants, key=lambda m: (m.file, m.line, order.get(m.operator, len(order)), m.before, m.after))


# --- grading them ------------------------------------------------------------------------


def starts_stack(lab: Lab, checkpoint: Checkpoint) -> bool:
    return checkpoint.id == STACK_CHECKPOINT or (lab.run is not None and lab.run.phased)


def chosen_checkpoints(lab: Lab) -> tuple[list[Checkpoint], list[Checkpoint]]:
    """(the checkpoints that grade each mutant, those left out): every one that starts no
    private stack; all of them for a lab whose every checkpoint starts one."""
    quick = [c for c in lab.checkpoints if not starts_stack(lab, c)]
    if not quick:
        return list(lab.checkpoints), []
    return quick, [c for c in lab.checkpoints if starts_stack(lab, c)]


def _student_folder(lab: Lab, folder: Path, mutant: Mutant | None) -> Path:
    for name in lab.student_files:
        shutil.copyfile(lab.solution / name, folder / name)
    if mutant is not None:
        (folder / mutant.file).write_text(mutant.code, encoding="utf-8")
    return folder


def grade_mutant(lab: Lab, checkpoints: list[Checkpoint], mutant: Mutant, limits: Limits) -> Outcome:
    """The checkpoints, in the lab's order, on the solution with this one mutant, up to the
    first that fails it."""
    with tempfile.TemporaryDirectory(prefix="airlock-mutant-") as scratch:
        folder = _student_folder(lab, Path(scratch), mutant)
        for checkpoint in checkpoints:
            verdict = run_checkpoint(lab, checkpoint, folder, limits, lab.folder.parent)
            if isinstance(verdict, Failed):
                return Outcome(mutant, checkpoint.id, verdict.case == TIME_LIMIT_CASE)
    return Outcome(mutant)


def _baseline(lab: Lab, checkpoints: list[Checkpoint]) -> tuple[float, str]:
    """(the slowest checkpoint's seconds, "") on the solution itself, or (0, why) when the
    solution fails one: then no mutant can be told apart from it."""
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix="airlock-mutant-") as scratch:
        folder = _student_folder(lab, Path(scratch), None)
        for checkpoint in checkpoints:
            started = time.monotonic()
            verdict = run_checkpoint(lab, checkpoint, folder, Limits(), lab.folder.parent)
            if isinstance(verdict, Failed):
                return 0.0, f"the solution itself fails {checkpoint.id}: {verdict.case}: {verdict.message}"
            slowest = max(slowest, time.monotonic() - started)
    return slowest, ""


def partition(mutants: list[Mutant], equivalents: list[Equivalent]) -> tuple[list[Mutant], list[Mutant],
                                                                             list[Equivalent]]:
    """(the mutants to grade, those recorded as equivalent, the entries that match no mutant):
    annotation-only mutants are in neither list, and an entry matching only one of them is stale."""
    real = [m for m in mutants if not m.annotation]
    equivalent = [m for m in real if any(matches(e, m) for e in equivalents)]
    stale = [e for e in equivalents if not any(matches(e, m) for m in real)]
    return [m for m in real if m not in equivalent], equivalent, stale


def sample(mutants: list[Mutant], size: int | None, seed: int, lab_id: str) -> list[Mutant]:
    """`size` of the mutants, the same ones for the same seed, lab and solution; all of
    them without a size."""
    if size is None or size >= len(mutants):
        return mutants
    chosen = set(random.Random(f"{seed}/{lab_id}").sample(range(len(mutants)), size))
    return [m for i, m in enumerate(mutants) if i in chosen]


def measure(lab: Lab, size: int | None = None, seed: int = 0, jobs: int = 1,
            progress: Callable[[str], None] = lambda _: None) -> LabScore:
    """The lab's mutation score: every mutant (or a sample) graded by its checkpoints."""
    started = time.monotonic()
    equivalents = load_equivalents(lab.folder / MUTANTS_FILE, lab.student_files)
    mutants = make_mutants([lab.solution / name for name in sorted(lab.student_files)])
    candidates, equivalent, stale = partition(mutants, equivalents)
    chosen = sample(candidates, size, seed, lab.id)
    checkpoints, left_out = chosen_checkpoints(lab)
    slowest, error = _baseline(lab, checkpoints)
    outcomes: list[Outcome] = []
    if not error:
        limits = Limits(wall_s=max(MIN_WALL_S, WALL_FACTOR * slowest))

        def graded(mutant: Mutant) -> Outcome:
            outcome = grade_mutant(lab, checkpoints, mutant, limits)
            progress(f"{lab.id}: {mutant.file}:{mutant.line} {mutant.operator} "
                     + (f"killed by {outcome.killed_by}" if outcome.killed_by else "SURVIVED"))
            return outcome

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            outcomes = list(pool.map(graded, chosen))
    killed = [o for o in outcomes if o.killed_by]
    return LabScore(lab=lab.id, checkpoints=[c.id for c in checkpoints], left_out=[c.id for c in left_out],
                    in_stack=[c.id for c in checkpoints if starts_stack(lab, c)],
                    total=len(mutants), annotation=sum(m.annotation for m in mutants), equivalent=len(equivalent),
                    run=len(outcomes), killed=len(killed), timeouts=sum(o.timed_out for o in killed),
                    survivors=[o.mutant for o in outcomes if not o.killed_by], stale=stale,
                    sampled=len(chosen) < len(candidates), seconds=round(time.monotonic() - started, 1),
                    error=error)


# --- the report --------------------------------------------------------------------------


def report_lines(result: LabScore) -> list[str]:
    sampled = f" (a sample of {result.run})" if result.sampled else ""
    why = ("the solution fails a checkpoint" if result.error else "under the target" if result.score < TARGET
           else "a stale equivalent entry" if result.stale else "")
    lines = [f"{result.lab}: score {result.score:.1%} ({f'FAIL: {why}' if why else 'ok'}, target "
             f"{TARGET:.0%}){sampled}; {result.seconds:.0f} s",
             f"  mutants {result.total}, annotation-only {result.annotation} (filtered: equivalent under "
             f"`from __future__ import annotations`), equivalent {result.equivalent} (labs/{result.lab}/"
             f"{MUTANTS_FILE}), run {result.run}, killed {result.killed} ({result.timeouts} by the time limit, "
             f"which counts as killed), survived {len(result.survivors)}",
             f"  checkpoints run: {', '.join(result.checkpoints)}"
             + (f"; left out (each starts a private stack): {', '.join(result.left_out)}" if result.left_out else "")
             + (f"; each in its own private stack (the lab has no other): {', '.join(result.in_stack)}"
                if result.in_stack else "")]
    if result.error:
        lines.append(f"  ERROR {result.error}")
    lines += [f"  survivor {m.file}:{m.line} {m.definition or '(top level)'} {m.operator}  {m.diff}"
              for m in result.survivors]
    lines += [f"  stale equivalent (matches no mutant): {e.file} {e.definition or '(top level)'} {e.operator}  "
              f"{e.before!r} -> {e.after!r}" for e in result.stale]
    return lines


def table_lines(results: list[LabScore]) -> list[str]:
    """The scores as a Markdown table, for docs/labs.md."""
    rows = ["| lab | mutants | annotation-only | equivalent | killed | survived | score |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    rows += [f"| {r.lab} | {r.total} | {r.annotation} | {r.equivalent} | {r.killed} | {len(r.survivors)} | "
             f"{r.score:.1%}{' (sample)' if r.sampled else ''} |" for r in results]
    return rows


def record(result: LabScore) -> dict[str, object]:
    """One lab's result as plain data for --json (the mutated code left out)."""
    return {"lab": result.lab, "checkpoints": result.checkpoints, "left_out": result.left_out,
            "in_stack": result.in_stack,
            "total": result.total, "annotation": result.annotation, "equivalent": result.equivalent,
            "run": result.run, "sampled": result.sampled, "killed": result.killed, "timeouts": result.timeouts,
            "survived": len(result.survivors), "score": round(result.score, 4), "passed": result.passed,
            "seconds": result.seconds, "error": result.error,
            "survivors": [{"file": m.file, "line": m.line, "definition": m.definition, "operator": m.operator,
                           "before": m.before, "after": m.after} for m in result.survivors],
            "stale": [msgspec.to_builtins(e) for e in result.stale]}


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
