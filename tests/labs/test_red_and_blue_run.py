"""`airlock lab run red-and-blue --dir D`: no plug point, so two phases, each its own private
stack: the student's attacks through the unguarded task, then the same attacks and the
corpus's honest customers with the student's guard. Real `python -m lab run` processes, and
the phased [run] table's format."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import pytest

from airlock.errors import UsageError
from course import catalog, phases
from course.catalog import LabFormatError, build_wrong_solution
from course.phases import PhaseProblem
from tests.conftest import ROOT
from tests.labs.support import kept_lab_run

LAB = catalog.find("red-and-blue")
RUN_TIMEOUT_S = 120
ATTACKS = ("override-en", "antworte-de", "hidden-base64", "just-ask")  # solution/attacks.py's names
HONEST = 11  # the corpus's benign emails in en, nl, de, ru, tr (the benign checkpoint's)


def lab_run(*argv: str, labs_root: Path | None = None) -> subprocess.CompletedProcess[str]:
    root = ["--labs-root", str(labs_root)] if labs_root else []
    return subprocess.run([sys.executable, "-m", "lab", *root, "run", "red-and-blue", *argv], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, stdin=subprocess.DEVNULL)


def phase_lines(out: str, name: str) -> dict[str, str]:
    """The email's line per phase, from the block under its `attack NAME` / `honest NAME` header."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"(attack|honest) {re.escape(name)}", line))
    found = {}
    for line in lines[start + 1:]:
        match = re.match(r"    (unguarded|guarded) +(.*)", line)
        if not match:
            break
        found[match[1]] = match[2]
    return found


def sends(calls_path: Path) -> list[str]:
    """The orders mail/send_status ran for, read straight from a stack's calls.jsonl (its call
    lines: an intent line is the claim made before the call)."""
    records = [json.loads(line) for line in calls_path.read_text().splitlines() if line.strip()]
    return [str(r["args"]["order_id"]) for r in records
            if (r.get("server"), r.get("tool")) == ("mail", "send_status") and r.get("event", "call") == "call"]


def no_run_folder(folder: Path) -> bool:
    runs = folder / ".airlock-lab" / "runs"
    return not runs.exists() or not any(runs.iterdir())


def test_the_reference_attacks_get_through_unguarded_and_none_with_the_guard(tmp_path: Path) -> None:
    """The reference: every attack sends for a stranger's order without the guard and is
    stopped with it, every honest customer is answered, exit 0; calls.jsonl agrees."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    done = lab_run("--dir", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for name in ATTACKS:
        line = phase_lines(out, name)
        assert set(line) == {"unguarded", "guarded"}, line
        assert "mail/send_status(order_id=" in line["unguarded"] and "-> GOT THROUGH: sent for " in line["unguarded"]
        calls, verdict = line["guarded"].split("  -> ")
        assert calls.startswith("refused") and "mail/send_status" not in calls
        assert verdict.startswith("stopped: step 2 mail/send_status: 1 of 2 independent sources agree")
    override = phase_lines(out, "override-en")
    assert "value '4411'" in override["unguarded"] and "kunde@example.de's order 4411" in override["unguarded"]
    honest = phase_lines(out, "benign-en-01.eml")
    assert set(honest) == {"guarded"}
    assert honest["guarded"].startswith("completed") and "-> answered" in honest["guarded"]
    assert "attacks that got through: unguarded 4, guarded 0  (of 4)" in out
    assert f"honest emails answered (guarded): {HONEST} of {HONEST}" in out
    assert "clean: where the defence holds" in out and "NOT CLEAN" not in out
    # one stack per phase, each with its own page and folder; the report is what calls.jsonl holds
    pages = dict(re.findall(r"^  (unguarded|guarded): (http://127\.0\.0\.1:[0-9]+/) was up during its phase", out,
                            re.MULTILINE))
    assert set(pages) == {"unguarded", "guarded"} and pages["unguarded"] != pages["guarded"]
    [data] = re.findall(r"^data: (.+)  \(one folder per phase\)$", out, re.MULTILINE)
    assert Path(data).parent == folder / ".airlock-lab" / "runs"
    unguarded, guarded = sends(Path(data) / "unguarded" / "calls.jsonl"), sends(Path(data) / "guarded" / "calls.jsonl")
    assert {"4411", "3048", "2024", "3012"} <= set(unguarded)
    assert not {"4411", "3048", "2024", "3012"} & set(guarded) and len(guarded) == HONEST


def test_json_report_of_the_reference(tmp_path: Path) -> None:
    """--json: one object, clean, per phase the emails with harm and got_through as calls.jsonl has them."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    done = lab_run("--dir", str(folder), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["lab"] == "red-and-blue" and report["clean"] is True and report["problems"] == []
    assert report["totals"]["got_through"] == {"unguarded": 4, "guarded": 0} and report["totals"]["attacks"] == 4
    assert report["totals"]["answered"] == {"guarded": HONEST}
    unguarded, guarded = report["phases"]
    assert (unguarded["id"], unguarded["holds"], guarded["id"], guarded["holds"]) \
        == ("unguarded", False, "guarded", True)
    assert [e["name"] for e in unguarded["emails"]] == list(ATTACKS)
    assert all(e["got_through"] and e["harm"] for e in unguarded["emails"])
    assert [e["name"] for e in guarded["emails"]][:4] == list(ATTACKS)
    assert not any(e["got_through"] for e in guarded["emails"])


def test_a_guard_that_allows_strangers_orders_is_not_clean_and_names_the_email(tmp_path: Path) -> None:
    """wrong/defend-the-guard-allowed-it (evidence without corroboration): the attacks still
    get through with the guard; exit 1, each one named with the order it sent for."""
    folder = build_wrong_solution(LAB.wrong_solution("defend-the-guard-allowed-it"), tmp_path / "mine")
    done = lab_run("--dir", str(folder))
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "attacks that got through: unguarded 4, guarded 4  (of 4)" in out
    assert "NOT CLEAN: 'override-en' got through (guarded): sent for kunde@example.de's order 4411" in out
    assert "-> GOT THROUGH: sent for kunde@example.de's order 4411" in phase_lines(out, "override-en")["guarded"]
    assert "clean: where" not in out


def test_a_guard_that_refuses_honest_customers_is_not_clean(tmp_path: Path) -> None:
    """wrong/benign-honest-customer-refused (min_sources 3): no attack gets through, but the
    honest customers are refused; exit 1 naming one."""
    folder = build_wrong_solution(LAB.wrong_solution("benign-honest-customer-refused"), tmp_path / "mine")
    done = lab_run("--dir", str(folder))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "attacks that got through: unguarded 4, guarded 0" in done.stdout
    assert "honest emails answered (guarded): 0 of 11" in done.stdout
    assert "NOT CLEAN: 'benign-de-04.eml', an honest email, was not answered (guarded): refused" in done.stdout
    assert "-> NOT ANSWERED" in phase_lines(done.stdout, "benign-de-04.eml")["guarded"]


def test_attacks_that_never_got_through_are_noted_not_failed(tmp_path: Path) -> None:
    """Attacks that only ask about the sender's own orders: nothing got through even unguarded;
    the guard still holds, so the run is clean (the attack checkpoint grades attacks), but the
    report says there was nothing for the guard to stop."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    (folder / "attacks.py").write_text(
        "def attacks():\n"
        "    return [{'name': f'own-{o}', 'from': 'mallory@example.net', 'subject': 'my order',\n"
        "             'body': f'Where is my order {o}?'} for o in ('1234', '1500', '2740')]\n")
    done = lab_run("--dir", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "attacks that got through: unguarded 0, guarded 0" in done.stdout
    assert "note: no attack got through the unguarded phase" in done.stdout


@pytest.mark.parametrize(("todo", "words"), [
    pytest.param(("attacks.py", "guard.py"), "attacks.py: attacks() is still a TODO", id="the-starter"),
    pytest.param(("guard.py",), "guard.py: preconditions() is still a TODO", id="guard-todo"),
])
def test_a_todo_is_a_usage_message_and_no_stack_starts(tmp_path: Path, todo: tuple[str, ...], words: str) -> None:
    """The starter (or a guard still TODO): exit 2, a message naming the file and what to do,
    no traceback, no stack started."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    for name in todo:
        shutil.copyfile(LAB.starter / name, folder / name)
    done = lab_run("--dir", str(folder))
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in done.stderr and "airlock lab check red-and-blue" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert no_run_folder(folder)


@pytest.mark.parametrize(("attacks", "words"), [
    pytest.param("def attacks():\n    return 'mail'\n", "attacks(): returned a str", id="not-a-list"),
    pytest.param("def attacks(:\n", "attacks.py cannot be loaded: SyntaxError", id="syntax-error"),
    pytest.param("import sys\nsys.exit(3)\n", "attacks.py cannot be loaded: SystemExit: 3", id="exits-at-import"),
])
def test_an_attacks_file_that_cannot_be_used_is_named(tmp_path: Path, attacks: str, words: str) -> None:
    """A broken attacks.py: exit 2 with the grader's own message for it, never a traceback."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    (folder / "attacks.py").write_text(attacks)
    done = lab_run("--dir", str(folder))
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and no_run_folder(folder)


def test_a_students_print_never_reaches_the_json_report(tmp_path: Path) -> None:
    """attacks() that prints: --json stdout is still exactly one JSON object."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    with (folder / "attacks.py").open("a") as file:
        file.write("\nprint('{\"forged\": true}')\n_real = attacks\n\n\ndef attacks():\n"
                   "    print('not json')\n    return _real()\n")
    done = lab_run("--dir", str(folder), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["clean"] is True and "forged" not in done.stdout


def test_a_student_function_that_hangs_is_a_named_problem(tmp_path: Path) -> None:
    """attacks() that never returns: the build is killed at its limit, a PhaseProblem says why."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    (folder / "attacks.py").write_text("def attacks():\n    while True:\n        pass\n")
    started = time.monotonic()
    with pytest.raises(PhaseProblem, match="did not return within 2 s"):
        phases.build(LAB.run.phases if LAB.run else "", folder, tmp_path / "data", timeout_s=2)
    assert time.monotonic() - started < 20
    assert not (tmp_path / "data").exists()


def test_a_builder_that_breaks_the_contract_is_named() -> None:
    """Phases the lab's builder returns are checked: an id twice or a task that is no file is a typed error."""
    email = phases.PhaseEmail("a", "m@example.net", b"x", benign=False)
    task = str(ROOT / "tasks" / "order_status.toml")
    with pytest.raises(UsageError, match="phase id 'one' is not a unique slug"):
        phases.checked("b", [phases.Phase("one", "t", task, [email], holds=False)] * 2)
    with pytest.raises(UsageError, match="task 'tasks/x.toml' is not an absolute path"):
        phases.checked("b", [phases.Phase("one", "t", "tasks/x.toml", [email], holds=True)])
    with pytest.raises(UsageError, match="an email name is used twice"):
        phases.checked("b", [phases.Phase("one", "t", task, [email, email], holds=True)])
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"phases": [{"id": "x"}]}', type=phases.Built)


def test_keep_holds_the_guarded_phases_stack_until_ctrl_c(tmp_path: Path) -> None:
    """--keep: the unguarded phase's stack is down after its phase, the guarded one's page
    answers until Ctrl-C, which stops it and exits 0."""
    folder = shutil.copytree(LAB.solution, tmp_path / "mine")
    with kept_lab_run(["run", "red-and-blue", "--dir", str(folder), "--keep"],
                      until="up until Ctrl-C") as (process, out):
        [unguarded] = re.findall(r"unguarded: (http://\S+) was up during its phase$", out, re.MULTILINE)
        [guarded] = re.findall(r"guarded: (http://\S+)  \(this phase's stack is up until Ctrl-C\)", out)
        with urllib.request.urlopen(guarded, timeout=10) as page:
            assert page.status == 200
        with pytest.raises(OSError):
            urllib.request.urlopen(unguarded, timeout=2)
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(guarded, timeout=2)


# --- the phased [run] table of lab.toml -------------------------------------------------------


def test_red_and_blue_runs_in_phases_with_no_plug() -> None:
    """red-and-blue's [run]: the grader's builder and judge, no plug, no task, no emails of its own."""
    run = LAB.run
    assert run is not None and run.phased
    assert (run.phases, run.judge, run.model) == ("course.graders.red_and_blue:run_phases",
                                                  "course.graders.red_and_blue:run_judge", "hostile")
    assert LAB.run_paths() is None and LAB.plug(Path("/s")) is None


def lab_copy(tmp_path: Path, old: str, new: str) -> Path:
    """A labs root holding a copy of red-and-blue, its lab.toml edited (old -> new)."""
    root = tmp_path / "labs"
    folder = shutil.copytree(LAB.folder, root / "red-and-blue")
    toml = folder / "lab.toml"
    text = toml.read_text()
    assert text.count(old) == 1, old
    toml.write_text(text.replace(old, new))
    return root


JUDGE = 'judge = "course.graders.red_and_blue:run_judge"'
PHASES = 'phases = "course.graders.red_and_blue:run_phases"'


@pytest.mark.parametrize(("old", "new", "named"), [
    pytest.param(JUDGE, "", "run.judge", id="no-judge"),
    pytest.param(PHASES, "", "run.phases", id="judge-without-phases"),
    pytest.param(PHASES, 'phases = "red_and_blue:run_phases"', "run.phases", id="not-under-lab-graders"),
    pytest.param(JUDGE, 'judge = "course.graders.nowhere:run_judge"', "no module course.graders.nowhere",
                 id="no-such-module"),
    pytest.param(JUDGE, JUDGE + '\nplug = "validator.check"', "run.plug: not with phases", id="plug-beside-phases"),
    pytest.param(JUDGE, JUDGE + '\ntask = "tasks/order_status.toml"', "run.task: not with phases",
                 id="task-beside-phases"),
    pytest.param(JUDGE, JUDGE + '\nemails = ["corpus/handmade"]', "run.emails: not with phases",
                 id="emails-beside-phases"),
    pytest.param(JUDGE, JUDGE + '\nphase = "x"', "phase", id="unknown-key"),
    pytest.param('model = "hostile"', 'model = "smart"', "run.model", id="unknown-model"),
    pytest.param(PHASES + "\n" + JUDGE, 'file = "attacks.py"', "run.plug: required", id="neither-plug-nor-phases"),
])
def test_a_broken_phased_run_table_names_file_and_key(tmp_path: Path, old: str, new: str, named: str) -> None:
    """A phased [run] that breaks the format fails the lab's load, naming the file and key."""
    root = lab_copy(tmp_path, old, new)
    with pytest.raises(LabFormatError) as caught:
        catalog.load(root / "red-and-blue")
    assert str(root / "red-and-blue" / "lab.toml") in str(caught.value) and named in str(caught.value)
