"""`airlock lab run ID --dir D`: the student's code plugged into a private stack, end to end
(a real `python -m lab run` process), and the [run] table of lab.toml that says how."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from airlock import keys
from airlock.client import IntakeClient
from airlock.wire import Email
from course import catalog
from course.catalog import LabFormatError, build_wrong_solution
from course.provenance import NOT_SENT
from course.run import running
from tests.conftest import ROOT
from tests.labs.support import kept_lab_run

SEPARATION = catalog.find("separation")
RUN_TIMEOUT_S = 120


def lab_run(*argv: str, labs_root: Path | None = None) -> subprocess.CompletedProcess[str]:
    root = ["--labs-root", str(labs_root)] if labs_root else []
    return subprocess.run([sys.executable, "-m", "lab", *root, "run", *argv], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=ROOT, stdin=subprocess.DEVNULL)


def line_of(out: str, file: str) -> str:
    (line,) = [line for line in out.splitlines() if f" {file} " in line]
    return line


def test_the_reference_runs_clean_and_the_report_says_what_ran(tmp_path: Path) -> None:
    """The reference checker: exit 0, every email with its outcome, benign calls listed, zero
    calls outside the plan and zero non-narrow values, the data folder and the page link."""
    folder = shutil.copytree(SEPARATION.solution, tmp_path / "mine")
    done = lab_run("separation", "--dir", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "separation: your code at validator.check" in out and "model hostile" in out
    benign = line_of(out, "benign-en-01.eml")
    assert benign.startswith("  * ") and "completed" in benign and "shop/lookup_order(" in benign
    refused = line_of(out, "reply-arabic-indic-digits.eml")
    assert "rejected" in refused and "student.refused" in refused and "no calls" in refused
    assert re.search(r"calls outside the plan +0 ", out) and re.search(r"non-narrow values at a tool +0 ", out)
    assert re.search(r"overruled by the kernel +0", out) and "clean: every email" in out
    [data] = re.findall(r"^data: (.+)$", out, re.MULTILINE)
    assert Path(data).parent == folder / ".airlock-lab" / "runs"
    assert (Path(data) / "trace.jsonl").is_file() and (Path(data) / "calls.jsonl").is_file()
    assert re.search(r"^live page: http://127\.0\.0\.1:[0-9]+/ was up during the run", out, re.MULTILINE)


def test_an_email_and_a_call_line_the_run_did_not_write_make_it_not_clean(tmp_path: Path) -> None:
    """The reference's run is clean; an email submitted with the run's own SMTP key and a line
    appended to calls.jsonl (what a student's code out of its sandbox could do) make it not
    clean, each named, once the stack has stopped."""
    folder = shutil.copytree(SEPARATION.solution, tmp_path / "mine")
    with running(SEPARATION, folder, tmp_path / "run") as (stack, report):
        assert report.problems == [] and report.foreign.total == 0
        raw = (ROOT / "samples/benign_en_order.eml").read_bytes()
        with IntakeClient(stack.settings, timeout_s=10, role=keys.SMTP_ROLE) as client:
            [(_, injected)] = client.submit([Email(raw, "eml", "smtp", "ceo@example.com", "dkim")])
            assert [result.message_id for result in client.outcomes([injected], 30)] == [injected]
        first = report.emails[0].id
        with open(stack.calls_path, "a", encoding="utf-8") as calls:
            calls.write(json.dumps({"event": "call", "at": "2026-01-01T00:00:00Z", "message_id": first, "step": 9,
                                    "server": "shop", "tool": "refund", "args": {"order_id": "4411"}}) + "\n")
    problems = "\n".join(report.problems)
    assert f"{NOT_SENT} (trace line" in problems, problems
    assert f"{injected} from ceo@example.com via smtp (sender proof dkim)" in problems
    assert "a call the trace has no allowed step that ran for (calls.jsonl line" in problems
    assert f"{first} step 9 shop/refund(order_id='4411')" in problems


def test_a_checker_that_passes_arabic_indic_digits_is_overruled_and_not_clean(tmp_path: Path) -> None:
    """A wrong checker: the kernel refuses what it passed (marked !, student.not_narrow), still
    nothing reaches a tool, and the run exits 1 saying why."""
    folder = build_wrong_solution(SEPARATION.wrong_solution("in-the-stack-arabic-indic"), tmp_path / "mine")
    done = lab_run("separation", "--dir", str(folder))
    assert done.returncode == 1, done.stdout + done.stderr
    line = line_of(done.stdout, "reply-arabic-indic-digits.eml")
    assert line.startswith("  ! ") and "student.not_narrow" in line and "no calls" in line
    assert "your check() passed '٤٤١١' -> the kernel refused it" in line
    assert re.search(r"calls outside the plan +0 ", done.stdout)
    assert re.search(r"non-narrow values at a tool +0 ", done.stdout)
    assert "NOT CLEAN: " in done.stdout and "overruled" in done.stdout


KEY_READER = """
import os, re

def check(answer):
    try:  # the run's secrets, as the service's environment held them; quietly
        open(f"/proc/{os.getppid()}/environ", "rb").read()
    except OSError:
        pass
    return answer if type(answer) is str and re.fullmatch(r"[0-9]{1,6}", answer) else None
"""


def test_a_correct_checker_that_reaches_for_the_keys_is_not_clean(tmp_path: Path) -> None:
    """Reading the service's environment is refused, and the try, even caught, voids every
    answer: the run is not clean, and each email's line says why."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "checker.py").write_text(KEY_READER)
    done = lab_run("separation", "--dir", str(folder))
    assert done.returncode == 1, done.stdout + done.stderr
    line = line_of(done.stdout, "reply-seven-digits.eml")
    assert line.startswith("  ! ") and "outside its sandbox" in line and "/proc" in line
    assert re.search(r"calls outside the plan +0 ", done.stdout) and "NOT CLEAN: " in done.stdout


def test_json_report_and_the_todo_starter(tmp_path: Path) -> None:
    """--json is one object; the untouched starter fails closed on every email (student.failed)."""
    folder = shutil.copytree(SEPARATION.starter, tmp_path / "mine")
    done = lab_run("separation", "--dir", str(folder), "--json", "--model", "recorded")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["lab"] == "separation" and report["clean"] is False and report["model"] == "recorded"
    assert report["totals"]["completed"] == 0 and report["totals"]["calls_outside_plan"] == 0
    assert all(e["student_rules"] == ["student.failed"] and e["calls"] == [] for e in report["emails"])
    assert report["totals"]["student_overruled"] == report["totals"]["emails"] == len(report["emails"])


@pytest.mark.parametrize(("content", "words"), [
    pytest.param(None, "does not exist", id="missing"),
    pytest.param("def check(answer)\n    return None\n", "checker.py does not load: SyntaxError", id="syntax-error"),
    pytest.param("def other(answer):\n    return None\n", "checker.py has no function check()", id="no-check"),
])
def test_a_student_file_that_cannot_plug_in_is_a_usage_error(tmp_path: Path, content: str | None,
                                                            words: str) -> None:
    """No stack starts for a file that is missing, does not load, or lacks check(): exit 2, why."""
    if content is not None:
        (tmp_path / "checker.py").write_text(content)
    done = lab_run("separation", "--dir", str(tmp_path))
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert not (tmp_path / ".airlock-lab" / "runs").exists() or not any((tmp_path / ".airlock-lab" / "runs").iterdir())


def lab_copy(tmp_path: Path, old: str = "", new: str = "") -> Path:
    """A labs root holding a copy of separation, its lab.toml edited (old -> new)."""
    root = tmp_path / "labs"
    folder = shutil.copytree(SEPARATION.folder, root / "separation")
    toml = folder / "lab.toml"
    text = toml.read_text()
    assert not old or text.count(old) == 1, old
    toml.write_text(text.replace(old, new) if old else text)
    return root


def test_a_lab_without_a_run_table_says_so(tmp_path: Path) -> None:
    """A lab with no [run] table: exit 2, naming it, no stack."""
    table = (SEPARATION.folder / "lab.toml").read_text()
    run_table = table[table.index("[run]"):table.index("[[hints]]")]
    root = lab_copy(tmp_path, run_table, "")
    root_lab = catalog.load(root / "separation")
    assert root_lab.run is None
    done = lab_run("separation", "--dir", str(SEPARATION.solution), labs_root=root)
    assert done.returncode == 2 and "has no [run] table" in done.stderr, done.stderr


def test_what_came_from_an_email_is_shown_escaped(tmp_path: Path) -> None:
    """An email's file name carrying an ESC sequence and a bidi control reaches the terminal escaped."""
    root = lab_copy(tmp_path, 'emails = ["corpus/handmade", "./emails"]', 'emails = ["./emails"]')
    emails = root / "separation" / "emails"
    shutil.copyfile(emails / "reply-seven-digits.eml", emails / "evil\x1b[2J\u202e.eml")
    folder = shutil.copytree(SEPARATION.solution, tmp_path / "mine")
    done = lab_run("separation", "--dir", str(folder), labs_root=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
    assert "evil\\x1b[2J\\u202e.eml" in done.stdout


def test_keep_holds_the_stack_and_page_until_ctrl_c(tmp_path: Path) -> None:
    """--keep: after the report the page answers; Ctrl-C stops the stack and exits 0."""
    root = lab_copy(tmp_path, 'emails = ["corpus/handmade", "./emails"]', 'emails = ["./emails"]')
    folder = shutil.copytree(SEPARATION.solution, tmp_path / "mine")
    argv = ["--labs-root", str(root), "run", "separation", "--dir", str(folder), "--keep"]
    with kept_lab_run(argv, until="live page:") as (process, out):
        [url] = re.findall(r"live page: (http://\S+)  \(up until Ctrl-C\)", out)
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)


# --- the [run] table of lab.toml --------------------------------------------------------------


def test_separation_runs_its_checker_in_the_validators_place() -> None:
    """separation's [run]: check() from checker.py at validator.check, the hostile corpus, offline."""
    run, paths = SEPARATION.run, SEPARATION.run_paths()
    assert run is not None and paths is not None
    assert (run.plug, run.file, run.model) == ("validator.check", "checker.py", "hostile")
    assert paths.task == ROOT / "tasks/order_status.toml"
    assert paths.emails == [ROOT / "corpus/handmade", SEPARATION.folder / "emails"]
    plug = SEPARATION.plug(Path("/s"))
    assert plug is not None and str(plug) == "validator.check=/s/checker.py"


@pytest.mark.parametrize(("old", "new", "named"), [
    pytest.param('plug = "validator.check"', 'plug = "validator.guess"', "run.plug", id="unknown-plug"),
    pytest.param('file = "checker.py"', 'file = "other.py"', "run.file", id="not-a-student-file"),
    pytest.param('task = "tasks/order_status.toml"', 'task = "tasks/nope.toml"', "run.task", id="missing-task"),
    pytest.param('task = "tasks/order_status.toml"', 'task = "/etc/passwd"', "run.task", id="absolute-path"),
    pytest.param('task = "tasks/order_status.toml"', 'task = "../tasks/order_status.toml"', "run.task",
                 id="path-outside"),
    pytest.param('model = "hostile"', 'model = "smart"', "run.model", id="unknown-model"),
    pytest.param('model = "hostile"', 'model = "hostile"\nrug_pull = "actor/catalog.toml"\nrug_pull_after = 2',
                 "run.rug_pull", id="rug-pull-without-catalog"),
    pytest.param('model = "hostile"', 'model = "hostile"\nrug_pull_after = 2', "run.rug_pull_after",
                 id="count-without-rug-pull"),
    pytest.param('model = "hostile"', 'model = "hostile"\nemail = []', "email", id="unknown-key"),
    pytest.param('emails = ["corpus/handmade", "./emails"]', 'emails = []', "run.emails", id="no-emails"),
    pytest.param('emails = ["corpus/handmade", "./emails"]', 'emails = ["./mails"]', "run.emails[0]",
                 id="missing-lab-folder"),
])
def test_a_broken_run_table_names_file_and_key(tmp_path: Path, old: str, new: str, named: str) -> None:
    """A [run] table that breaks the format fails the lab's load, naming the file and key."""
    root = lab_copy(tmp_path, old, new)
    with pytest.raises(LabFormatError) as caught:
        catalog.load(root / "separation")
    assert str(root / "separation" / "lab.toml") in str(caught.value) and named in str(caught.value)


def test_a_rug_pull_swaps_a_copy_of_the_catalog_after_its_count(tmp_path: Path) -> None:
    """rug_pull: after rug_pull_after emails the run's copy of the catalog holds the rug
    pull's content; the lab's own catalog file is never written."""
    lab_folder = tmp_path / "labs" / "separation"
    root = lab_copy(tmp_path, 'model = "hostile"', 'model = "hostile"\ncatalog = "./catalog.toml"\n'
                    'rug_pull = "./pulled.toml"\nrug_pull_after = 2')
    shipped = (ROOT / "actor/catalog.toml").read_text()
    pulled = shipped.replace("Look up", "Look up (pulled)", 1)
    assert pulled != shipped
    (lab_folder / "catalog.toml").write_text(shipped)
    (lab_folder / "pulled.toml").write_text(pulled)
    shutil.rmtree(lab_folder / "emails")
    shutil.copytree(SEPARATION.folder / "emails", lab_folder / "emails")
    table = (lab_folder / "lab.toml").read_text().replace('emails = ["corpus/handmade", "./emails"]',
                                                           'emails = ["./emails"]')
    (lab_folder / "lab.toml").write_text(table)
    folder = shutil.copytree(SEPARATION.solution, tmp_path / "mine")
    done = lab_run("separation", "--dir", str(folder), "--data", str(tmp_path / "data"), labs_root=root)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    pull = next(i for i, line in enumerate(lines) if "rug pull: the catalog was replaced after 2 emails" in line)
    assert sum(line.startswith("  * ") for line in lines[:pull]) == 2
    assert (tmp_path / "data" / "run-catalog.toml").read_text() == pulled
    assert (lab_folder / "catalog.toml").read_text() == shipped
