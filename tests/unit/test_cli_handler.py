"""One error handler for every command: the runtime's (cli/runtime.py), the tools around it
(cli/tools.py, the benchmark included) and the labs' (cli/lab.py) fail alike, each
failure one escaped line on stderr and the exit code of airlock.errors.exit_code."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from airlock.errors import (
    EX_ALREADY_RUNNING,
    EX_CONFIG,
    EX_INTERRUPTED,
    EX_IOERR,
    EX_TEMPFAIL,
    EX_USAGE,
    ConfigError,
    DiskFull,
    LockHeld,
    QueueFull,
    RequestRefused,
    UsageError,
)
from cli import lab as lab_commands, runtime as cli, tools as lab_cli
from course.catalog import LabFormatError, UnknownLab

HOSTILE = "\x1b[2J\u202e"  # what must never reach a terminal raw


def _failing(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        raise exc
    return handler


# Each entry point with a command whose handler is replaced by one that raises, the program
# name its lines start with, and the argv that reaches that handler.
ENTRIES = {
    "runtime": (cli, "cmd_pending", "airlock", ["pending"], cli.main),
    "tools": (lab_cli, "cmd_pins", "airlock", ["pins"], lab_cli.main),
    "labs": (lab_commands, "cmd_list", "airlock lab", ["list"], lab_commands.main),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("exc", "code"), [
    pytest.param(UsageError(f"bad {HOSTILE}"), EX_USAGE, id="usage"),
    pytest.param(ConfigError(f"bad {HOSTILE}"), EX_CONFIG, id="config"),
    pytest.param(DiskFull(f"full {HOSTILE}"), EX_IOERR, id="disk-full"),
    pytest.param(QueueFull(f"full {HOSTILE}"), EX_TEMPFAIL, id="queue-full"),
    pytest.param(LockHeld(Path("d"), "stack", 7, HOSTILE), EX_ALREADY_RUNNING, id="lock-held"),
    pytest.param(RequestRefused(f"no {HOSTILE}"), 1, id="refused"),
])
def test_every_entry_point_fails_with_one_table(monkeypatch, capsys, entry: str, exc: Exception, code: int) -> None:
    """The same error gives the same exit code and one escaped line from every entry point."""
    module, name, program, argv, main = ENTRIES[entry]
    monkeypatch.setattr(module, name, _failing(exc))
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith(f"{program}: ") and err.count("\n") == 1
    assert "\x1b" not in err and "\u202e" not in err and "\\x1b[2J" in err


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("exc", "code"), [
    pytest.param(KeyboardInterrupt(), EX_INTERRUPTED, id="ctrl-c"),
    pytest.param(BrokenPipeError(), 0, id="broken-pipe"),
])
def test_every_entry_point_ends_quietly_on_ctrl_c_and_a_closed_pipe(monkeypatch, capsys, entry: str,
                                                                    exc: BaseException, code: int) -> None:
    """Ctrl-C is 130 and a reader that went away (`| head`) is 0, with nothing on stderr."""
    module, name, _, argv, main = ENTRIES[entry]
    monkeypatch.setattr(module, name, _failing(exc))
    assert main(argv) == code
    assert capsys.readouterr().err == ""


def test_the_labs_run_through_the_one_handler(monkeypatch) -> None:
    """cli/lab.py hands its parsed command to the one handler (cli/handling.py), named `airlock lab`."""
    seen: list[str] = []

    def handled(run: Callable[[], int], prefix: str = "airlock", wording: object = None) -> int:
        seen.append(prefix)
        return 0

    monkeypatch.setattr(lab_commands, "handled", handled)
    assert lab_commands.main(["list"]) == 0
    assert seen == ["airlock lab"]


@pytest.mark.parametrize(("exc", "code"), [
    pytest.param(UnknownLab(f"no lab {HOSTILE}"), EX_USAGE, id="unknown-lab"),
    pytest.param(LabFormatError(f"labs/x/lab.toml: {HOSTILE}"), EX_CONFIG, id="lab-format"),
])
def test_a_labs_own_errors_are_translated_to_the_table(monkeypatch, capsys, exc: Exception, code: int) -> None:
    """An unknown lab is bad usage (2) and a broken lab file bad configuration (78), one line."""
    monkeypatch.setattr(lab_commands, "cmd_list", _failing(exc))
    assert lab_commands.main(["list"]) == code
    err = capsys.readouterr().err
    assert err.startswith("airlock lab: ") and err.count("\n") == 1 and "\x1b" not in err


def test_a_folder_the_user_may_not_write_is_one_line_naming_it(monkeypatch, capsys) -> None:
    """PermissionError in a lab command: exit 1, the path and the uid, and how to run as oneself."""
    monkeypatch.setattr(lab_commands, "cmd_list", _failing(PermissionError(13, "denied", f"/work/{HOSTILE}")))
    assert lab_commands.main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("airlock lab: cannot write /work/\\x1b[2J") and "permission denied" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(("exc", "code", "said"), [
    pytest.param(UsageError(f"bad {HOSTILE}"), EX_USAGE, "airlock: bad \\x1b[2J", id="usage"),
    pytest.param(KeyboardInterrupt(), EX_INTERRUPTED, "", id="ctrl-c"),
])
def test_the_benchmark_fails_like_every_other_command(monkeypatch, capsys, exc: BaseException, code: int,
                                                      said: str) -> None:
    """`airlock bench` (its own options) goes through the same handler: escaped, same codes."""
    from bench import __main__ as bench

    monkeypatch.setattr(bench, "run", _failing(exc))
    assert lab_cli.main(["bench", "--emails", "5"]) == code
    err = capsys.readouterr().err
    assert err.startswith(said) and "\x1b" not in err and err.count("\n") == (1 if said else 0)


def test_a_direct_run_of_the_benchmark_becomes_airlock_bench(monkeypatch) -> None:
    """`python -m bench ARGS` becomes `python -P -m lab bench ARGS`, so the one handler reports it."""
    import os
    import runpy
    import sys

    became: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:
        became.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.setattr(sys, "argv", ["bench", "--emails", "5"])
    monkeypatch.delitem(sys.modules, "bench.__main__", raising=False)  # run afresh, as python -m does
    with pytest.raises(SystemExit):
        runpy.run_module("bench.__main__", run_name="__main__")
    assert became == [[sys.executable, "-P", "-m", "lab", "bench", "--emails", "5"]]
