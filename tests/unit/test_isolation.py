"""The code-level walls: services never import each other; the reader holds no tool code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("broker", "reader", "validator", "actor", "intake")


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


@pytest.mark.parametrize("package", ["airlock", *SERVICES])
def test_no_runtime_code_imports_the_labs(package: str) -> None:
    """The labs grade students' code: no service, and not the kernel the services import,
    may import `lab` (the CLI reaches it as `python -m lab`, a process of its own)."""
    for module, names in imported_top_levels(package).items():
        assert "lab" not in names, f"{module} imports lab"


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
