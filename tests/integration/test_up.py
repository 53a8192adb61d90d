"""`airlock up` on a real machine: one stack per data dir, a start that fails ends with
78 and one line (never a restart loop), and a banner that tells the truth about the model
and the recordings."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airlock import keys, locks, settings as settings_module
from airlock.errors import EX_ALREADY_RUNNING, AlreadyRunning, ConfigError
from ops import preflight, supervisor
from tests.conftest import ROOT, TASKS, airlock_env, closed_port_url
from tests.integration.conftest import Stack

SEED = str(ROOT / "samples" / "seed_4411_de.eml")
PIDS = ("up", "broker", "validator", "actor", "reader-1")


def test_second_up_on_a_data_dir_is_refused_and_leaves_the_first_alone(stack) -> None:
    """A second `airlock up` on a running stack's data dir exits 73 (its own code) naming the
    first's pid; the first keeps its pid files, its one reader, and its work."""
    first = stack().start()
    pids = {name: first.pid(name) for name in PIDS}
    second = first.airlock("up", timeout=60)
    assert second.returncode == EX_ALREADY_RUNNING == 73, second.stdout + second.stderr
    assert second.stderr.count("\n") == 1 and f"pid {first.process.pid}" in second.stderr
    assert "airlock is up" not in second.stdout
    assert {name: first.pid(name) for name in PIDS} == pids
    (result,) = first.inject(SEED)
    assert result["outcome"] == "completed"
    assert first.status()["workers"].get("reader") == 1, first.status()
    assert any(line.startswith("  recordings: ") and "recorded answer(s) from" in line for line in first.output)


def test_a_dead_holders_lock_file_does_not_block(tmp_path: Path) -> None:
    """A lock file left by a process that died (killed -9) holds no lock: up may start."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from airlock.locks import one_stack\n"
        "with one_stack(Path(sys.argv[1])): print('held', flush=True); sys.stdin.read()"), str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdin is not None and holder.stdout is not None  # both piped
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(AlreadyRunning, match=rf"pid {holder.pid}\b"), locks.one_stack(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    assert (tmp_path / "run" / "up.lock").read_text() == f"{holder.pid}\n"  # the stale file is still there
    with locks.one_stack(tmp_path):
        pass


def test_a_port_in_use_is_a_config_error_naming_it(tmp_path: Path) -> None:
    """Something listening on one of the stack's ports: the check names port and setting."""
    settings = settings_module.load(airlock_env(tmp_path))
    preflight.check_ports(settings)  # all free: no error
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", settings.ports["validator"]))
        taken.listen()
        with pytest.raises(ConfigError, match=rf"port {settings.ports['validator']} \(validator, "
                                              r"AIRLOCK_VALIDATOR_PORT\).* in use"):
            preflight.check_ports(settings)


def test_up_with_a_port_in_use_exits_78_without_starting(tmp_path: Path) -> None:
    """`airlock up` whose intake port is taken: exit 78 with one line naming the port,
    never "airlock is up", never a restart, and no pid files left behind."""
    s = Stack(tmp_path)
    env = s.env
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(env["AIRLOCK_INTAKE_PORT"])))
        taken.listen()
        done = s.airlock("up", timeout=60)
    assert done.returncode == 78, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and f"port {env['AIRLOCK_INTAKE_PORT']} (intake" in done.stderr
    assert "airlock is up" not in done.stdout and "restarting" not in done.stdout + done.stderr
    assert not list((tmp_path / "data" / "run").glob("*.pid"))


def test_broker_that_cannot_bind_exits_78_naming_the_port(tmp_path: Path) -> None:
    """The broker itself (the race the pre-check cannot close) exits 78, never 1, which
    the supervisor would restart every 10 s forever."""
    env = Stack(tmp_path).env
    keys.generate(tmp_path / "data" / "keys")  # a broker without keys refuses before it binds
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(env["AIRLOCK_ACTOR_PORT"])))
        taken.listen()
        done = subprocess.run([sys.executable, "-m", "broker"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 78, done.stderr
    assert done.stderr.count("\n") == 1
    assert f":{env['AIRLOCK_ACTOR_PORT']} (actor, AIRLOCK_ACTOR_PORT)" in done.stderr and "in use" in done.stderr


def test_dead_model_and_missing_recordings_are_said_at_start_and_in_the_outcome(stack, tmp_path: Path) -> None:
    """A task copied away from its recordings and a model URL where nothing listens: the
    banner warns about both, quickly; the seed email (recorded for the shipped task) then
    ends rejected with a reason that names the dead model and the missing recording."""
    copy = tmp_path / "elsewhere" / "order_status.toml"
    copy.parent.mkdir()
    shutil.copy(TASKS / "order_status.toml", copy)
    url = closed_port_url()
    s = stack(task=str(copy))
    started = time.monotonic()
    s.start("--model-url", url)
    output = "".join(s.output)
    assert f"model:      WARNING: {url} does not answer (connection refused)" in output
    missing = copy.parent.parent / "samples" / "recorded" / "order_status.jsonl"
    assert f"  recordings: none: {missing} does not exist" in output
    assert f"reader: recordings: none: {missing} does not exist" in output
    assert time.monotonic() - started < 60
    (result,) = s.inject(SEED)
    assert result["outcome"] == "rejected"
    assert f"the model at {url} did not answer (refused" in result["reason"]
    assert "there is no recording for this email" in result["reason"]
    (outcome,) = s.trace(result["id"], "outcome")
    assert outcome["reason"] == result["reason"]


@pytest.mark.parametrize("command", [
    pytest.param(["up"], id="up"),
    pytest.param(["attack", SEED], id="attack"),
    pytest.param(["record", "--model-url", "http://127.0.0.1:9", SEED], id="record"),
])
def test_a_task_path_that_is_not_there_says_pass_task(tmp_path: Path, command: list[str]) -> None:
    """Outside the clone, `--task tasks/order_status.toml` is not there: every command that
    takes --task says where it looked and to pass --task FILE, in one line."""
    done = Stack(tmp_path).airlock(*command, "--task", "tasks/order_status.toml", cwd=tmp_path, timeout=60)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert f"tasks/order_status.toml (from {tmp_path})" in done.stderr
    assert "pass --task FILE (or set AIRLOCK_TASK)" in done.stderr and str(TASKS) in done.stderr


def test_no_worker_starts_when_the_broker_refuses_to_start(tmp_path: Path) -> None:
    """The broker starts first; when it exits 78 (say, it lost a port in a race the
    pre-check cannot close) the stack stops with 78 and no worker was ever started, so
    none can connect to whatever holds the port."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "refusing_broker.py").write_text(
        "import sys\nprint('broker: cannot listen on tcp://127.0.0.1:1 (intake): in use', file=sys.stderr)\n"
        "sys.exit(78)\n")
    settings = settings_module.load(airlock_env(tmp_path / "data"))
    env = supervisor.child_env(settings, {**os.environ, "PYTHONPATH": str(fake)})
    stack = supervisor.Supervisor(settings, env, readers=1)
    stack.children[0].module = "refusing_broker"
    said: list[str] = []
    assert stack.run(threading.Event(), announce=said.append) == 78
    assert [child.name for child in stack.children if child.process is not None] == ["broker"]
    assert said == ["airlock: broker refused its configuration (see above); stopping"]


def test_a_dead_model_is_reported_quickly(fake_model) -> None:
    """Nothing listening: "connection refused"; any HTTP answer (even 501 for GET) is alive."""
    assert preflight.model_silence(closed_port_url()) == "connection refused"
    assert preflight.model_silence(fake_model("4411").url) is None


def test_smtp_intake_without_its_extra_names_the_pip_command(tmp_path: Path) -> None:
    """`python -m intake` without aiosmtpd: exit 78 and one line naming '.[smtp]', no traceback."""
    blocked = "import runpy, sys; sys.modules['aiosmtpd'] = None; runpy.run_module('intake', run_name='__main__')"
    env = Stack(tmp_path).env
    done = subprocess.run([sys.executable, "-c", blocked], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 78, done.stderr
    assert done.stderr.count("\n") == 1 and "pip install -e '.[smtp]'" in done.stderr


def test_up_refuses_beside_services_a_killed_up_left_running(tmp_path: Path) -> None:
    """Services an earlier `airlock up` left running (where children cannot die with it, or
    a broker started on its own): a new `airlock up` on that data dir exits 73 naming them
    by pid, instead of a second broker on the same trace."""
    s = Stack(tmp_path)
    env = s.env
    keys.generate(tmp_path / "data" / "keys")  # so the broker left running serves, as `airlock up` would start it
    left = subprocess.Popen([sys.executable, "-m", "broker"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        run = tmp_path / "data" / "run"
        run.mkdir(parents=True)
        (run / "broker.pid").write_text(f"{left.pid}\n")
        (run / "reader-1.pid").write_text(f"{os.getpid()}\n")  # alive, but not a reader: not blamed
        done = s.airlock("up", timeout=60)
    finally:
        left.terminate()
        try:
            left.wait(20)
        except subprocess.TimeoutExpired:  # seen once at load 8 in CI: never leave it running
            left.kill()
            left.wait(20)
    assert done.returncode == EX_ALREADY_RUNNING, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1
    assert f"left broker (pid {left.pid}) running; stop them first: kill {left.pid}" in done.stderr


def test_up_closes_a_key_folder_an_older_version_left_open(stack, tmp_path: Path) -> None:
    """`airlock up` on keys an older version made 0755 makes their folder 0700 and says so in its banner."""
    s = stack()
    folder = s.data / "keys"
    keys.generate(folder)
    folder.chmod(0o755)
    s.start()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert any("was open to other users, now 0700" in line for line in s.output)


def test_up_adds_the_smtp_pair_to_a_keys_folder_made_before_it(stack) -> None:
    """A data dir whose keys predate the SMTP intake's own key: `airlock up` adds the smtp
    pair (and says so), keeps every other key byte for byte, and the stack serves."""
    s = stack()
    folder = s.data / "keys"
    keys.generate(folder)
    for path in [*folder.rglob("smtp.key"), *folder.rglob("smtp.key_secret")]:
        path.unlink()
    before = {p.name: p.read_bytes() for p in folder.glob("*.key*")}
    s.start()
    assert "added the key pair of smtp" in "".join(s.output), "".join(s.output)
    after = {p.name: p.read_bytes() for p in folder.glob("*.key*")}
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"smtp.key", "smtp.key_secret"}
    assert keys.smtp_keys(folder) == {keys.load(folder, keys.SMTP_ROLE).public.decode()}
    (result,) = s.inject(str(ROOT / "samples" / "seed_4411_de.eml"))
    assert result["outcome"] == "completed", result
