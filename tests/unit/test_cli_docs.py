"""docs/cli.md's tables read against the parsers and the exit-code table: every command has a
row, every option of a command is named in its row and every option a row names exists, and
every exit code the code names is explained, so the page and the commands cannot drift."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock import errors
from bench import __main__ as bench
from cli import lab as lab_commands, runtime as cli, tools as lab_cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
WITH_VERBS = {"corpus", "k8s", "swarm", "lab", "demo"}  # commands whose row names their sub-commands


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def table_after(marker: str) -> list[list[str]]:
    """The rows (cells, header and rule left out) of the first table from `marker` on."""
    lines = PAGE[PAGE.index(marker):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


def command_rows() -> dict[str, str]:
    """Each command the Commands table names, with its row's whole text (a row naming
    `approve\\|deny` counts for both)."""
    rows: dict[str, str] = {}
    for cells in table_after("# Commands"):
        words = cells[0].strip("`").split()
        assert words[0] == "airlock", cells[0]
        for name in words[1].split("\\|"):
            assert name not in rows, f"two rows for {name}"
            rows[name] = " ".join(cells)
    return rows


ROWS = command_rows()


def sub_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return dict(action.choices) if action else {}


def options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """The long options a person types, of `parser` and its sub-commands (help and hidden ones left out)."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        yield from (o for o in action.option_strings if o.startswith("--"))
    for sub in sub_parsers(parser).values():
        yield from options(sub)


def parser_of(name: str) -> argparse.ArgumentParser:
    """The parser that really reads `airlock NAME`'s options (lab's tools parse their own)."""
    if name == "bench":
        return bench.build_parser()
    if name == "lab":
        return lab_commands.build_parser()
    if name in lab_cli.COMMANDS:
        return sub_parsers(lab_cli.build_parser())[name]
    return sub_parsers(cli.build_parser())[name]


COMMANDS = sorted(sub_parsers(cli.build_parser()))


def test_every_command_has_a_row_and_every_row_a_command() -> None:
    """The table names exactly the commands `airlock --help` lists."""
    assert sorted(ROWS) == COMMANDS


@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "lab"])
def test_every_option_of_a_command_is_named_in_its_row(name: str) -> None:
    """Each long option the command's parser takes appears in its row."""
    missing = sorted({o for o in options(parser_of(name)) if not re.search(rf"{o}(?![\w-])", ROWS[name])})
    assert not missing, f"docs/cli.md's row of `airlock {name}` misses {missing}"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_a_row_names_exists(name: str) -> None:
    """No row names an option its command does not take (a renamed or removed one)."""
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", ROWS[name])) - {"--help"}  # every command's
    unknown = sorted(named - set(options(parser_of(name))))
    assert not unknown, f"`airlock {name}` takes none of {unknown}"


@pytest.mark.parametrize("name", sorted(WITH_VERBS))
def test_a_commands_row_names_each_of_its_verbs(name: str) -> None:
    """`airlock lab`, `swarm`, `k8s` and `corpus`: the row's synopsis lists every sub-command."""
    synopsis = next(cells[0] for cells in table_after("# Commands") if cells[0].strip("`").split()[1] == name)
    assert synopsis.strip("`").split()[2].split("\\|") == list(sub_parsers(parser_of(name)))


def test_airlock_help_names_every_lab_verb() -> None:
    """`airlock --help`'s line for `lab` lists the labs' commands, all of them, in their order."""
    text = cli.LAB_COMMANDS["lab"]
    assert text.split(": ", 1)[1].split(", ") == list(sub_parsers(lab_commands.build_parser()))


def test_the_exit_table_explains_every_code_the_code_names() -> None:
    """The exit-code table has one row per code airlock.errors names, and 1 and lab run's 3."""
    listed = [int(cells[0]) for cells in table_after("| exit | meaning | who |")]
    named = {code for key, code in vars(errors).items() if key.startswith("EX_")}
    assert sorted(listed) == sorted(named | {1, lab_commands.STACK_FAILED})
