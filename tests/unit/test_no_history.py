"""History lives in CHANGELOG.md: no other file of the project names an issue.

The README, docs/, docstrings and comments say what and why; which issue asked for a change,
and the figures before it, are the changelog's. A file that cites "issue 17" ages with the
tracker and sends a newcomer to a place they cannot see.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ISSUE = re.compile(r"\bissues? #?[0-9]+\b", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".js", ".html", ".css", ".cfg", ".txt", ""}
LEFT_OUT = {"CHANGELOG.md"}
SKIPPED_FOLDERS = {".git", ".venv", "venv", "node_modules", "airlock-data", "airlock-keys", "airlock-grades",
                   "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "airlock.egg-info"}
SKIPPED_TOP = {"tests"}  # this file's own pattern, and test data quoting foreign text


def project_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if set(parts) & SKIPPED_FOLDERS or parts[0] in SKIPPED_TOP or not path.is_file():
            continue
        if path.name in LEFT_OUT or path.suffix not in TEXT_SUFFIXES or path.stat().st_size > 1_000_000:
            continue
        found.append(path)
    return found


def issue_citations(text: str) -> list[str]:
    return [m.group(0) for m in ISSUE.finditer(text)]


def test_no_file_but_the_changelog_names_an_issue() -> None:
    """README, docs, code, comments, task and lab files: none says "issue N"."""
    cited = {}
    for path in project_files():
        found = issue_citations(path.read_text(encoding="utf-8", errors="replace"))
        if found:
            cited[str(path.relative_to(ROOT))] = found
    assert not cited, cited


def test_the_check_sees_a_citation_and_the_tree() -> None:
    """The pattern finds the usual spellings and the walk reaches the README, docs and code."""
    assert issue_citations("as issue 17 measured; Issue #4; issues 3") == ["issue 17", "Issue #4", "issues 3"]
    assert issue_citations("an issue with 3 emails; tissue 4") == []
    names = {str(p.relative_to(ROOT)) for p in project_files()}
    assert {"README.md", "docs/guarantees.md", "airlock/wire.py", "tasks/order_status.toml"} <= names
    assert "CHANGELOG.md" not in names
