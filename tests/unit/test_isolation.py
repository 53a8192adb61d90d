"""The code-level walls: services never import each other; the reader holds no tool code;
the kernel and the services import nothing of the tools no service runs (the operator's, the
course's, the red-team harness's: TOOLS)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("broker", "reader", "validator", "actor", "intake")
# Every package the runtime runs: the kernel and each service, the live page included.
# Read from pyproject, so a package added there is held to the wall without editing this.
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
# The packages of the tools no service runs: the command line, the operator's tools, the red-team
# harness, its content, the course and the benchmarks (and `lab`, the alias of `airlock lab`).
TOOLS = frozenset({"cli", "ops", "harness", "redteam", "course", "bench", "lab"})
RUNTIME = tuple(p for p in PACKAGES if "." not in p and p not in TOOLS)
# `python -m airlock`: the operator's command line (cli/) under the kernel's name. No service
# imports it; the import-linter contracts name it as their one exception too.
COMMAND_LINE_ALIAS = "airlock/__main__.py"
# The tools that no service runs: where each once lived in the runtime, and where it lives now.
MOVED_TOOLS = {"airlock/attack.py": "harness/attack.py", "airlock/campaign.py": "harness/campaign.py",
               "airlock/score.py": "harness/score.py", "airlock/hostile.py": "harness/hostile.py",
               "airlock/corpus.py": "redteam/corpus.py", "airlock/verify.py": "ops/verify.py",
               "actor/pins.py": "ops/pins.py", "reader/record.py": "redteam/record.py", "naive": "redteam/naive",
               "airlock/cli.py": "cli/runtime.py", "airlock/supervisor.py": "ops/supervisor.py",
               "airlock/lifeline.py": "ops/lifeline.py", "airlock/injected.py": "ops/injected.py",
               "airlock/escalations.py": "ops/escalations.py", "airlock/lab_init.py": "ops/lab_init.py"}


def imported_top_levels(package: str) -> dict[str, set[str]]:
    """Each module of a package -> the top-level names it imports (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    assert found, f"no module in {package}/: every check over its imports would pass unread"
    return found


@pytest.mark.parametrize("service", SERVICES)
def test_services_import_only_the_kernel_and_themselves(service: str) -> None:
    """No service module imports another service."""
    others = set(SERVICES) - {service}
    for module, names in imported_top_levels(service).items():
        assert not names & others, f"{module} imports {sorted(names & others)}"


def test_kernel_imports_no_service() -> None:
    """The shared kernel depends on no service (the CLI reaches them as processes)."""
    for module, names in imported_top_levels("airlock").items():
        assert not names & set(SERVICES), f"{module} imports {sorted(names & set(SERVICES))}"


def test_the_runtime_packages_are_the_kernel_and_every_service() -> None:
    """The wall below covers the kernel, the student-code runner, the four services, the intake and the page."""
    assert set(RUNTIME) == {"airlock", "studentcode", *SERVICES, "dashboard"}


@pytest.mark.parametrize("package", RUNTIME)
def test_no_runtime_code_imports_the_tools(package: str) -> None:
    """The labs grade students' code and the tools attack, score and fake models: no service,
    and not the kernel the services import, may import a tool package."""
    for module, names in imported_top_levels(package).items():
        if module != COMMAND_LINE_ALIAS:
            assert not names & TOOLS, f"{module} imports {sorted(names & TOOLS)}"


def test_importing_the_whole_runtime_loads_no_tool() -> None:
    """Importing every module of the kernel and of every service (their __main__ aside, which
    would start them) pulls no module of a tool package into the process: proven, not read."""
    modules = sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for package in RUNTIME for path in (ROOT / package).rglob("*.py")
                     if path.name != "__main__.py")
    probe = ("import importlib, json, sys\n"
             f"for name in {modules!r}: importlib.import_module(name)\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(TOOLS)!r})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert len(modules) > 40 and json.loads(out.stdout) == []


@pytest.mark.parametrize(("old", "new"), MOVED_TOOLS.items())
def test_the_tools_no_service_runs_live_outside_the_runtime(old: str, new: str) -> None:
    """attack, campaign, score, hostile model, corpus, verify, pins, record, naive agent
    and the operator's command line are tools: gone from the kernel and the services, present
    in a tool package."""
    # Source, not folders: a clone pulled across the move keeps an untracked __pycache__/.
    left = [ROOT / old] if (ROOT / old).is_file() else list((ROOT / old).rglob("*.py"))
    assert not left, f"{old} is still in the runtime"
    assert new.split("/")[0] in TOOLS and (ROOT / new).exists(), f"{new} is missing"


@pytest.mark.parametrize("package", [p for p in RUNTIME if p != "airlock"])
def test_no_service_module_is_a_command_line_tool(package: str) -> None:
    """A service's only command line is its own `python -m SERVICE`: a module of its
    package that parses arguments is a tool, and tools live in a tool package (as pins and record do)."""
    for module, names in imported_top_levels(package).items():
        if not module.endswith("__main__.py"):
            assert "argparse" not in names, f"{module} parses a command line: move it to a tool package"


def test_reader_package_contains_no_tool_code() -> None:
    """Nothing in reader/ names the catalog, the call log or a tool of the plan."""
    forbidden = ("calls.jsonl", "CallLog", "catalog", "lookup_order", "send_status", "refund_all",
                 "subprocess", "os.system")
    for path in (ROOT / "reader").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".toml", ".json", ".txt", ""):
            text = path.read_text(errors="replace")
            for word in forbidden:
                assert word not in text, f"{path.relative_to(ROOT)} mentions {word!r}"


def test_running_reader_loads_no_other_service() -> None:
    """Importing everything the reader process runs pulls in no actor, validator or broker module."""
    probe = ("import sys, reader.app, reader.mail, reader.model, reader.prompt, reader.recordings; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'actor', 'validator', 'broker'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("service", ["broker", "reader", "intake", "dashboard"])
def test_a_service_that_plugs_no_student_code_loads_no_runner(service: str) -> None:
    """Importing the whole kernel (settings read the plug as a value only) and every module of a
    service that plugs in no student's code pulls in nothing of studentcode: proven, not read."""
    modules = sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for package in ("airlock", service) for path in (ROOT / package).rglob("*.py")
                     if path.name != "__main__.py")
    probe = ("import importlib, json, sys\n"
             f"for name in {modules!r}: importlib.import_module(name)\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'studentcode')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [], out.stdout
