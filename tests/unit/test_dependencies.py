"""Every third-party module the code or the tests import is declared in pyproject.

A package that only happens to be installed on one machine (numpy on the CI machine, once)
hides a missing declaration until a newcomer's fresh venv stops at collection. This reads
the imports themselves, so it fails on the machine that has the package too.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Import names that differ from the distribution that provides them. Small and explicit:
# add a line when a new such dependency comes in (the test below names the module).
DISTRIBUTION_OF = {
    "zmq": "pyzmq",
    "dkim": "dkimpy",
    "dns": "dnspython",
    "yaml": "PyYAML",
    "llama_cpp": "llama-cpp-python",
}

# Folders that hold no project code: virtual environments, build output, the data dir.
SKIPPED_DIRS = {"build", "dist", "airlock-data", "node_modules", "__pycache__"}


def normalized(name: str) -> str:
    """PEP 503 name normalization: PyYAML, pyyaml and py_yaml are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """'starlette>=1.10' -> 'starlette'; 'llama-cpp-python[server]>=0.3' -> 'llama-cpp-python'."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"unreadable requirement in pyproject.toml: {requirement!r}"
    return normalized(match.group(1))


def declared(*groups: str) -> set[str]:
    """Distribution names in the runtime dependencies and the named extras, following an
    extra that names others of this project (`test = ["airlock[dashboard,smtp]", ...]`) as pip does."""
    project = PYPROJECT["project"]
    names = {requirement_name(r) for r in project.get("dependencies", [])}
    pending, seen = list(groups), set()
    while pending:
        group = pending.pop()
        if group in seen:
            continue
        seen.add(group)
        for requirement in project["optional-dependencies"][group]:
            if requirement_name(requirement) == normalized(project["name"]):
                pending += re.findall(r"[A-Za-z0-9_-]+", requirement.split("[", 1)[1].split("]", 1)[0])
            else:
                names.add(requirement_name(requirement))
    return names


def python_files(root: Path) -> Iterator[Path]:
    """The project's .py files: hidden folders, build output and any virtual environment
    (a folder with pyvenv.cfg, whatever its name) are not walked."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (d.startswith(".") or d in SKIPPED_DIRS or d.endswith(".egg-info")
                                                 or (Path(folder, d) / "pyvenv.cfg").exists()))
        yield from (Path(folder, f) for f in sorted(files) if f.endswith(".py"))


def first_party(name: str, importer: Path) -> bool:
    """A package or module of this repository, or a script's sibling module."""
    return any((base / name).is_dir() or (base / f"{name}.py").is_file()
               for base in (ROOT, importer.parent))


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one file that are neither stdlib nor ours."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names
            if n not in sys.stdlib_module_names and n != "__future__" and not first_party(n, path)}


def undeclared(files: list[Path], allowed: set[str]) -> list[str]:
    missing = []
    for path in files:
        for module in sorted(third_party_imports(path)):
            if normalized(DISTRIBUTION_OF.get(module, module)) not in allowed:
                missing.append(f"{path.relative_to(ROOT)} imports {module!r} "
                               f"(distribution {DISTRIBUTION_OF.get(module, module)!r})")
    return missing


def test_every_test_import_is_declared_for_the_test_extra() -> None:
    """What any module imports (tests, services, tools) installs with `pip install -e '.[test]'`."""
    files = list(python_files(ROOT))
    assert any(p.parts[-3:] == ("tests", "unit", "test_selection.py") for p in files)
    assert undeclared(files, declared("test")) == []


def test_service_imports_are_declared_at_runtime_or_in_an_extra() -> None:
    """Code outside tests/ needs only the runtime dependencies or one of the named extras,
    so `pip install -e '.[dashboard]'` (say) is enough for the part that needs it."""
    extras = tuple(PYPROJECT["project"]["optional-dependencies"])
    files = [p for p in python_files(ROOT) if p.relative_to(ROOT).parts[0] != "tests"]
    assert undeclared(files, declared(*extras)) == []


def test_the_reader_finds_third_party_imports_and_skips_ours(tmp_path: Path) -> None:
    """The import reader sees nested, aliased and from-imports, and leaves stdlib,
    relative and first-party imports alone: the checks above can fail."""
    source = tmp_path / "sample.py"
    (tmp_path / "sibling.py").write_text("")
    source.write_text(
        "import os, numpy as np\n"
        "from zmq.asyncio import Context\n"
        "from . import local\n"
        "from airlock import wire\n"
        "import sibling\n"
        "def f():\n"
        "    import yaml\n")
    assert third_party_imports(source) == {"numpy", "zmq", "yaml"}
    assert undeclared([ROOT / "tests" / "unit" / "test_selection.py"], declared()) != []


def test_virtual_environments_and_hidden_folders_are_not_read(tmp_path: Path) -> None:
    """A venv inside the checkout (any name) holds other projects' imports, not ours."""
    for folder in ("pkg", "venv/lib", ".hidden", "build"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "m.py").write_text("")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert [p.relative_to(tmp_path).as_posix() for p in python_files(tmp_path)] == ["pkg/m.py"]


@pytest.mark.parametrize(("requirement", "name"), [
    ("pyzmq>=25", "pyzmq"), ("llama-cpp-python[server]>=0.3", "llama-cpp-python"),
    ("PyYAML ; python_version>'3'", "pyyaml"), ("typing_extensions", "typing-extensions")])
def test_requirement_names_are_normalized(requirement: str, name: str) -> None:
    """Requirement strings reduce to PEP 503 names, extras and markers dropped."""
    assert requirement_name(requirement) == name


def test_an_extra_that_names_other_extras_declares_theirs() -> None:
    """`test` names `airlock[dashboard,smtp,lab]` and `lab` names `airlock[graders]`: their
    packages count as the test extra's, and the project itself is not a dependency."""
    assert {"starlette", "aiosmtpd", "docker", "hypothesis", "numpy"} <= declared("test")
    assert "airlock" not in declared("test") and "numpy" not in declared("dashboard")
