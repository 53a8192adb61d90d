"""Exit codes: one table (airlock.errors.exit_code), named once, used by every command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from airlock import errors
from airlock.errors import (
    EX_ALREADY_RUNNING,
    EX_CONFIG,
    EX_IOERR,
    EX_TEMPFAIL,
    EX_USAGE,
    AirlockError,
    AlreadyRunning,
    CatalogError,
    DiskFull,
    KeyRefused,
    QueueFull,
    RequestRefused,
    SettingsError,
    TaskError,
    UsageError,
    exit_code,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("airlock", "broker", "reader", "validator", "actor", "intake", "dashboard", "lab")
NAMED = {code for name, code in vars(errors).items() if name.startswith("EX_")}  # the codes airlock.errors names


@pytest.mark.parametrize(("exc", "code"), [
    pytest.param(SettingsError("x"), EX_CONFIG, id="settings"),
    pytest.param(TaskError("x"), EX_CONFIG, id="task"),
    pytest.param(CatalogError("x"), EX_CONFIG, id="catalog"),
    pytest.param(UsageError("x"), EX_USAGE, id="usage"),
    pytest.param(DiskFull("x"), EX_IOERR, id="disk-full"),
    pytest.param(QueueFull("x"), EX_TEMPFAIL, id="queue-full"),
    pytest.param(AlreadyRunning("x"), EX_ALREADY_RUNNING, id="already-running"),
    pytest.param(KeyRefused("x"), 1, id="key-refused"),
    pytest.param(RequestRefused("x"), 1, id="refused"),
    pytest.param(AirlockError("x"), 1, id="other"),
])
def test_each_error_has_its_documented_code(exc: AirlockError, code: int) -> None:
    assert exit_code(exc) == code


def _literal_exits(path: Path, root: Path = ROOT) -> list[str]:
    """`return N`, `sys.exit(N)` and `SystemExit(N)` with N one of the named codes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        value = None
        if isinstance(node, ast.Return):
            value = node.value
        elif isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "exit")
                or (isinstance(node.func, ast.Name) and node.func.id == "SystemExit")):
            value = node.args[0]
        if isinstance(node, ast.Return | ast.Call) and isinstance(value, ast.Constant) and type(value.value) is int \
                and value.value in NAMED:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {value.value}")
    return found


def test_no_command_spells_a_named_exit_code_as_a_number() -> None:
    """A code written as a bare number drifts from the table; each is named in airlock.errors."""
    found = [hit for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             if path != Path(errors.__file__).resolve() for hit in _literal_exits(path)]
    assert found == []


def test_the_finder_finds_a_bare_code(tmp_path: Path) -> None:
    """The check above can fail: it sees `return 78`, `sys.exit(2)` and `SystemExit(130)`."""
    sample = tmp_path / "x.py"
    sample.write_text("import sys\ndef f():\n    return 78\nsys.exit(2)\nraise SystemExit(130)\nreturn_ = 1\n")
    assert [hit.split(": ")[1] for hit in _literal_exits(sample, tmp_path)] == ["78", "2", "130"]
