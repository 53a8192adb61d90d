"""The airlock command: every entry point declared and working, every error one line."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from airlock.cli import build_parser
from tests.conftest import ROOT, airlock_env

SEED = str(ROOT / "samples" / "seed_4411_de.eml")
pytestmark = pytest.mark.integration
COMMANDS = ["up", "inject", "trace", "status", "pending", "approve", "deny", "record", "verify", "attack", "naive",
            "model", "corpus", "keys", "bench"]


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airlock", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, input=stdin, timeout=60)


def test_console_script_points_at_main() -> None:
    """pyproject declares `airlock = airlock.cli:main`, and that callable exists."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["airlock"].partition(":")
    assert (module, name) == ("airlock.cli", "main")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    """`airlock CMD --help` works for each command."""
    done = run(command, "--help")
    assert done.returncode == 0 and command in done.stdout


def test_parser_knows_exactly_the_documented_commands() -> None:
    """The parser's commands are the ones the README and tests cover."""
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(subparsers.choices) == sorted(COMMANDS)


@pytest.mark.parametrize("service", ["broker", "reader", "validator", "actor"])
def test_services_refuse_bad_config_with_one_line(tmp_path, service: str) -> None:
    """`python -m SERVICE` with a bad setting exits 78 with one line, no traceback."""
    env = {**airlock_env(tmp_path), "AIRLOCK_INTAKE_PORT": "nope", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", service], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78
    assert done.stderr.count("\n") == 1 and "AIRLOCK_INTAKE_PORT" in done.stderr


def test_inject_without_a_broker_is_one_clear_line(tmp_path) -> None:
    """No broker listening: exit 1, one line that says where it looked."""
    env = {**airlock_env(tmp_path), "PYTHONPATH": str(ROOT)}
    done = run("inject", "--timeout", "0.5", SEED, env=env)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "did not answer" in done.stderr and env["AIRLOCK_INTAKE_PORT"] in done.stderr


@pytest.mark.parametrize(("args", "code", "says"), [
    (["inject", "/no/such/file.eml"], 2, "no such file"),
    (["inject"], 2, "nothing to inject"),
    (["trace", "nope"], 1, "no trace"),  # an unknown id is a refusal, not bad usage
    (["up", "--task", "/no/task.toml"], 78, "not found"),
    (["up", "--readers", "0"], 2, "at least 1"),
])
def test_usage_errors_are_one_line(tmp_path, args: list[str], code: int, says: str) -> None:
    """Mistakes give one line on stderr and a distinct exit code."""
    env = {**airlock_env(tmp_path), "PYTHONPATH": str(ROOT)}
    done = run(*args, env=env)
    assert done.returncode == code and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_inject_forms_and_trace(stack) -> None:
    """Files, --text and stdin all inject; --json prints id and file; trace shows the email."""
    s = stack().start()
    plain = s.airlock("inject", "--json", SEED)
    (line,) = [json.loads(x) for x in plain.stdout.splitlines()]
    assert set(line) == {"id", "file"} and line["file"] == SEED
    from_stdin = s.inject("-", stdin=(ROOT / "samples" / "seed_4411_de.eml").read_text())
    assert from_stdin[0]["file"] == "<stdin>" and from_stdin[0]["outcome"] == "completed"
    text = s.inject("--text", "hello")
    assert text[0]["outcome"] == "rejected"
    shown = s.airlock("trace", from_stdin[0]["id"])
    assert shown.returncode == 0
    assert [l.split()[2:4] for l in shown.stdout.splitlines()] == [
        ["broker", "received"], ["reader", "model_answer"], ["validator", "verdict"],
        ["actor", "authorization"], ["actor", "call"], ["actor", "observation"],
        ["actor", "authorization"], ["actor", "call"], ["actor", "observation"], ["broker", "outcome"]]
    assert "outcome=completed" in shown.stdout
    status = s.airlock("status")
    assert status.returncode == 0 and "'reader': 1" in status.stdout


def test_trace_follow_prints_new_lines(stack) -> None:
    """`airlock trace --follow` prints lines as the broker appends them."""
    s = stack().start()
    follower = subprocess.Popen([sys.executable, "-m", "airlock", "trace", "--follow", "--json"], cwd=ROOT,
                                env=s.env, stdout=subprocess.PIPE, text=True)
    try:
        (result,) = s.inject(SEED)
        for line in follower.stdout:
            record = json.loads(line)
            if record["message_id"] == result["id"] and record["event"] == "outcome":
                break
    finally:
        follower.terminate()
        follower.wait(5)
        follower.stdout.close()
