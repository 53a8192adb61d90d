"""Every relative link in README.md and docs/*.md reaches a file of the repository, and a
`#anchor` a heading of that file, so moving text between pages cannot leave a link dangling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))
            if not re.match(r"[a-z]+:", t)]  # http:, https:, mailto: are not the repository's


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    """A link's file exists (relative to its page) and its #anchor is one of that file's headings."""
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        reached = (page.parent / path).resolve() if path else page
        if not reached.exists():
            broken.append(f"{target}: no file {reached}")
        elif fragment and reached.suffix == ".md" and fragment not in anchors(reached):
            broken.append(f"{target}: no heading #{fragment} in {reached.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_anchor_and_link_readers_read_what_github_renders(tmp_path: Path) -> None:
    """Anchors drop punctuation and keep hyphens; links inside code fences and web links are not checked."""
    assert anchor("The model: server, constraint, prompt") == "the-model-server-constraint-prompt"
    assert anchor("The actor's gate") == "the-actors-gate"
    page = tmp_path / "page.md"
    page.write_text("# A page\n[x](other.md#a) ![y](pic.png) [w](https://e.org)\n```\n[z](in-code.md)\n```\n")
    assert links(page) == ["other.md#a", "pic.png"] and anchors(page) == {"a-page"}
