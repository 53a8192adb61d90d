"""The supervisor's faults: a killed `airlock up` takes its children with it, a
second broker on a data dir refuses, the supervisor outlives its own failed writes and a
child that keeps crashing, and its stuck-broker rule judges progress, not age."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock import keys, settings as settings_module
from airlock.errors import AlreadyRunning
from ops import preflight, supervisor
from tests.conftest import ROOT, airlock_env
from tests.integration.conftest import Stack, wait_until
from tests.tmpfs import own_tmpfs

CHILDREN = ("broker", "validator", "actor", "reader-1")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: nothing may reap an orphan's corpse here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def fake_modules(folder: Path, **sources: str) -> str:
    """Write each `name=source` as folder/name.py; the PYTHONPATH that finds them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(source)
    return os.pathsep.join((str(folder), str(ROOT)))


def test_killing_up_takes_every_child_with_it(tmp_path: Path) -> None:
    """`airlock up` killed with -9, its actor paused (a paused old actor that
    outlived it would run calls twice beside the new one): every child is gone soon after, the
    paused one too, every port is free, and a new `airlock up` on the same data dir and
    ports comes up (no orphan serves, no "is up")."""
    first = Stack(tmp_path)
    first.start()
    assert first.process is not None  # started
    pids = {name: first.pid(name) for name in CHILDREN}
    try:
        os.kill(pids["actor"], signal.SIGSTOP)
        first.process.kill()
        first.process.wait()
        assert wait_until(lambda: not any(alive(pid) for pid in pids.values()), timeout_s=30), \
            {name: pid for name, pid in pids.items() if alive(pid)}
        preflight.check_ports(settings_module.load(first.env))  # every port free again
        second = Stack(tmp_path)
        second.env = first.env  # the same data dir and ports
        try:
            second.start()
            assert "airlock is up" in "".join(second.output)
        finally:
            second.stop()
    finally:
        for pid in pids.values():  # the old code leaves them running: this test's to stop
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        first.stop()


def test_a_second_broker_on_a_data_dir_refuses_with_78(tmp_path: Path) -> None:
    """`python -m broker` on a data dir whose broker runs, even on other ports (no bind can
    fail): exit 78 with one line naming the lock and the holder's pid, before any bind."""
    data = tmp_path / "data"
    keys.generate(data / "keys")
    env = {**os.environ, **airlock_env(data), "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-m", "broker"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        trace_file = data / "trace.jsonl"
        assert wait_until(lambda: trace_file.exists() and b'"started"' in trace_file.read_bytes(), timeout_s=60)
        other_ports = {**os.environ, **airlock_env(data), "PYTHONPATH": str(ROOT)}
        second = subprocess.Popen([sys.executable, "-m", "broker"], env=other_ports, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        try:
            _, err = second.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()
            second.communicate()
            pytest.fail("a second broker on the same data dir is serving")
        assert second.returncode == 78, err
        assert err.count("\n") == 1 and f"pid {first.pid}" in err and "broker.lock" in err, err
    finally:
        first.terminate()
        first.wait(20)


def _supervisor(tmp_path: Path, pythonpath: str, modules: dict[str, str]) -> supervisor.Supervisor:
    settings = settings_module.load({**airlock_env(tmp_path / "data"), "AIRLOCK_RESTART_BACKOFF_MAX_S": "0.5"})
    stack = supervisor.Supervisor(settings, supervisor.child_env(settings, {**os.environ, "PYTHONPATH": pythonpath}),
                                  readers=1)
    for child in stack.children:
        child.module = modules.get(child.name, "idle_child")
    return stack


def test_the_supervisor_survives_failed_writes_and_restarts_until_the_cause_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pid file write fails (ENOSPC) and so does every line it prints; the broker
    crashes while the disk is "full": the supervisor keeps running and restarting it with
    its backoff, and once the cause goes the broker stays up and its pid file is written,
    with no one's help."""
    full, starts = tmp_path / "disk-full", tmp_path / "starts"
    full.touch()
    pythonpath = fake_modules(
        tmp_path / "fake",
        idle_child="import time\nwhile True: time.sleep(1)\n",
        full_disk_broker=(f"import sys, time\nopen({str(starts)!r}, 'a').write('start\\n')\n"
                          f"import os\nif os.path.exists({str(full)!r}): sys.exit(1)\n"
                          "while True: time.sleep(1)\n"))

    write = supervisor._write_atomically

    def no_space(path: Path, text: str) -> None:
        if full.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(path, text)

    said: list[str] = []

    def announce(line: str) -> None:
        said.append(line)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # stdout on the full disk too

    monkeypatch.setattr(supervisor, "_write_atomically", no_space)
    stack = _supervisor(tmp_path, pythonpath, {"broker": "full_disk_broker"})
    stop, code = threading.Event(), []
    runner = threading.Thread(target=lambda: code.append(stack.run(stop, announce=announce)))
    runner.start()
    try:
        assert wait_until(lambda: starts.exists() and starts.read_text().count("start") >= 3, timeout_s=60), said
        full.unlink()  # space is back
        restarted = starts.read_text().count("start")
        assert wait_until(lambda: starts.read_text().count("start") > restarted, timeout_s=60), said
        broker = stack.children[0]
        assert wait_until(lambda: broker.process is not None and broker.process.poll() is None, timeout_s=30)
        pid_file = stack.run_dir / "broker.pid"  # bookkeeping resumes too, naming the live broker
        assert wait_until(lambda: broker.process is not None and pid_file.exists()
                          and pid_file.read_text() == f"{broker.process.pid}\n", timeout_s=30)
        assert (stack.run_dir / "up.pid").read_text() == f"{os.getpid()}\n"
        assert runner.is_alive()
    finally:
        stop.set()
        runner.join(60)
    assert code == [0], said
    assert any("broker exited with 1; restarting" in line for line in said), said
    assert any("cannot write" in line and "broker.pid" in line for line in said), said


BUSY = "while True: pass"
# The main thread blocked for good while another thread keeps busy, as libzmq's I/O threads
# and the authenticator would for a deadlocked broker.
DEADLOCKED = ("import threading\ndef spin():\n    while True: pass\n"
              "threading.Thread(target=spin, daemon=True).start()\nthreading.Event().wait()")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="progress is read from /proc (Linux)")
@pytest.mark.parametrize(("script", "stopped", "stuck"), [
    pytest.param(BUSY, False, False, id="busy-recovering"),
    pytest.param(BUSY, True, True, id="sigstopped"),
    pytest.param(DEADLOCKED, False, True, id="main-thread-deadlocked"),
])
def test_a_silent_broker_is_killed_only_when_it_makes_no_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, stopped: bool, stuck: bool) -> None:
    """A broker that has not answered for far longer than BROKER_SILENT_S: left alone while
    its main thread burns CPU (recovering a big trace), killed once it is stopped (SIGSTOP)
    or its main thread stands still, however busy its other threads are."""
    monkeypatch.setattr(supervisor, "BROKER_SILENT_S", 1.0)
    monkeypatch.setattr(supervisor, "STACK_DUMP_S", 0.0)
    stack = _supervisor(tmp_path, str(ROOT), {})
    broker = stack.children[0]
    broker.process = process = subprocess.Popen([sys.executable, "-c", script])
    broker.started -= 3600  # started an hour ago and never answered
    said: list[str] = []
    try:
        if stopped:
            broker.process.send_signal(signal.SIGSTOP)
        # Watched for several times BROKER_SILENT_S, as _wait_ready does after each silent status.
        def unstuck_or_killed() -> bool:
            stack._unstick_broker(None, said.append)
            return process.poll() is not None

        killed = wait_until(unstuck_or_killed, timeout_s=5 * supervisor.BROKER_SILENT_S, every_s=0.2)
        assert killed == stuck, said
        assert bool(said) == stuck and all("no progress" in line for line in said), said
    finally:
        if broker.process.poll() is None:
            broker.process.kill()
        broker.process.wait()


@pytest.mark.parametrize("kernel", [pytest.param(True, id="parent-death-signal"),
                                    pytest.param(False, id="no-prctl-fallback")])
def test_a_child_dies_with_its_parent_with_or_without_the_kernels_help(tmp_path: Path, kernel: bool) -> None:
    """A parent that arranged for its child to die with it is killed with -9: the child is
    gone soon after, by the kernel's parent-death signal, or where there is none (not
    Linux: prctl made to fail here) by its own thread watching for a new parent."""
    child_code = ("import os, sys, time\nfrom airlock import locks\n"
                  + ("" if kernel else "locks._parent_death_signal = lambda number: False\n")
                  + "print(os.getpid(), locks.die_with_parent(os.getppid()), flush=True)\n"
                  "while True: time.sleep(1)\n")
    parent_code = ("import subprocess, sys, time\n"
                   f"subprocess.Popen([sys.executable, '-c', {child_code!r}])\n"
                   "while True: time.sleep(1)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert parent.stdout is not None  # piped
    pid, how = parent.stdout.readline().split(" ", 1)
    child = int(pid)
    try:
        assert ("parent-death signal" in how) == kernel, how
        parent.kill()
        parent.wait()
        assert wait_until(lambda: not alive(child), timeout_s=20)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
        parent.stdout.close()


def test_a_lifeline_child_left_running_is_named(tmp_path: Path) -> None:
    """A child of an earlier stack still running under its lifeline (its parent alive, say a
    supervisor stuck in the kernel) is named with its pid by the next `airlock up`'s check."""
    pythonpath = fake_modules(tmp_path / "fake", reader="import time\nwhile True: time.sleep(1)\n")
    left = subprocess.Popen([sys.executable, "-m", "ops.lifeline", str(os.getpid()), "reader"],
                            env={**os.environ, "PYTHONPATH": pythonpath})
    try:
        run = tmp_path / "data" / "run"
        run.mkdir(parents=True)
        (run / "reader-1.pid").write_text(f"{left.pid}\n")
        assert wait_until(lambda: b"reader" in Path(f"/proc/{left.pid}/cmdline").read_bytes())
        with pytest.raises(AlreadyRunning, match=rf"left reader-1 \(pid {left.pid}\) running"):
            preflight.check_left_running(run)
    finally:
        left.kill()
        left.wait()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs of this test's own, unmounted after (root only: skipped otherwise)."""
    with own_tmpfs(tmp_path, "size=2m") as disk:
        yield disk


def test_the_supervisor_survives_a_real_full_disk(tmp_path: Path, tiny_disk: Path) -> None:
    """The data dir on a 2 MiB tmpfs, filled to the last byte: the pid files fail for real
    (ENOSPC), the broker keeps crashing and being restarted; once the filler is removed the
    broker stays up and its pid file is written, with no one's help."""
    filler = tiny_disk / "filler"
    starts = tmp_path / "starts"  # off the full disk: how the test counts starts
    pythonpath = fake_modules(
        tmp_path / "fake",
        idle_child="import time\nwhile True: time.sleep(1)\n",
        full_disk_broker=(f"import os, sys, time\nopen({str(starts)!r}, 'a').write('start\\n')\n"
                          f"if os.path.exists({str(filler)!r}): sys.exit(1)\n"
                          "while True: time.sleep(1)\n"))
    settings = settings_module.load({**airlock_env(tiny_disk / "data"), "AIRLOCK_RESTART_BACKOFF_MAX_S": "0.5"})
    stack = supervisor.Supervisor(settings, supervisor.child_env(settings, {**os.environ, "PYTHONPATH": pythonpath}),
                                  readers=1)
    for child in stack.children:
        child.module = "full_disk_broker" if child.name == "broker" else "idle_child"
    (tiny_disk / "data" / "run").mkdir(parents=True)
    with open(filler, "wb") as fill:
        try:
            while True:
                fill.write(b"\0" * 65536)
                fill.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    said: list[str] = []
    stop, code = threading.Event(), []
    runner = threading.Thread(target=lambda: code.append(stack.run(stop, announce=said.append)))
    runner.start()
    try:
        assert wait_until(lambda: starts.exists() and starts.read_text().count("start") >= 3, timeout_s=60), said
        assert any("No space left on device" in line for line in said), said
        filler.unlink()
        broker = stack.children[0]
        pid_file = stack.run_dir / "broker.pid"
        assert wait_until(lambda: broker.process is not None and broker.process.poll() is None
                          and pid_file.exists() and pid_file.read_text() == f"{broker.process.pid}\n",
                          timeout_s=60), said
        assert runner.is_alive()
    finally:
        stop.set()
        runner.join(60)
    assert code == [0], said
