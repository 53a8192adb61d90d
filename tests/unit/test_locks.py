"""airlock.locks: one holder per lock file, named when refused, gone with its holder; lock
files never followed through a link; the pid hint is a hint (a full disk does not refuse);
and a lifeline child that finds its parent already gone never runs its service."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlock import locks
from airlock.errors import ConfigError, LockHeld
from tests.conftest import ROOT


def test_a_held_lock_is_refused_naming_the_holder_and_freed_on_release(tmp_path: Path) -> None:
    """A second hold of the same file is LockHeld with the holder's pid; after release it is free."""
    path = tmp_path / "broker.lock"
    with locks.hold(path, "broker"):
        assert locks.holder(path) == os.getpid()
        with pytest.raises(LockHeld, match=rf"another broker \(pid {os.getpid()}\) holds {path}") as refused:
            locks.hold(path, "broker")
        assert refused.value.holder == os.getpid() and refused.value.what == "broker"
    assert locks.holder(path) is None
    locks.hold(path, "broker").release()


def test_a_dead_holders_lock_is_free(tmp_path: Path) -> None:
    """A holder killed with -9 leaves its file (and pid) but no lock: the next hold succeeds."""
    path = tmp_path / "broker.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from airlock import locks\n"
        "held = locks.hold(Path(sys.argv[1]), 'broker'); print('held', flush=True); sys.stdin.read()"), str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdin is not None and holder.stdout is not None  # both piped
    try:
        assert holder.stdout.readline() == "held\n"
        assert locks.holder(path) == holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    assert locks.holder(path) is None
    locks.hold(path, "broker").release()


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    """broker.lock a link to a file of this user's: ConfigError, the target untouched."""
    target = tmp_path / "bashrc"
    target.write_text("the user's own\n")
    (tmp_path / "broker.lock").symlink_to(target)
    with pytest.raises(ConfigError, match=r"broker\.lock: a link"):
        locks.hold(tmp_path / "broker.lock", "broker")
    assert target.read_text() == "the user's own\n"


def test_a_hard_link_is_locked_but_never_written(tmp_path: Path) -> None:
    """A lock file with a second name (a hard link planted to a file of this user's) is
    locked, and its text left alone: the pid hint goes only into a file of one name."""
    target = tmp_path / "bashrc"
    target.write_text("the user's own\n")
    os.link(target, tmp_path / "broker.lock")
    with locks.hold(tmp_path / "broker.lock", "broker"):
        assert target.read_text() == "the user's own\n"


def test_a_lock_file_is_private(tmp_path: Path) -> None:
    """A lock file made here is 0600, whatever the umask."""
    with locks.hold(tmp_path / "broker.lock", "broker"):
        assert (tmp_path / "broker.lock").stat().st_mode & 0o777 == 0o600


def test_a_hint_that_cannot_be_written_still_holds_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk when the pid is written: the lock is held all the same, never a refusal."""
    def no_space(*_: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "broker.lock"
    monkeypatch.setattr(os, "pwrite", no_space)
    with locks.hold(path, "broker"):
        monkeypatch.undo()
        with pytest.raises(LockHeld, match=r"pid unknown"):
            locks.hold(path, "broker")


def test_a_disk_error_is_not_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC making the lock file is an OSError (a crash the supervisor retries), never a
    ConfigError (exit 78, which would stop the stack for good)."""
    real_open = os.open

    def full(path, flags, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", full)
    with pytest.raises(OSError) as failed:
        locks.hold(tmp_path / "broker.lock", "broker")
    assert failed.value.errno == errno.ENOSPC and not isinstance(failed.value, ConfigError)


def test_a_lifeline_whose_parent_is_already_gone_never_runs_the_service(tmp_path: Path) -> None:
    """`python -m ops.lifeline PID MODULE` where PID is not its parent (the supervisor
    died before the child could arrange to die with it): exit at once, the module never run."""
    (tmp_path / "marker_service.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    not_the_parent = os.getpid() + 1 if os.getppid() != os.getpid() + 1 else os.getpid() + 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), str(ROOT)))}
    done = subprocess.run([sys.executable, "-m", "ops.lifeline", str(not_the_parent), "marker_service"],
                          env=env, capture_output=True, timeout=60)
    assert done.returncode == 1 and not (tmp_path / "ran").exists()
    done = subprocess.run([sys.executable, "-m", "ops.lifeline", str(os.getpid()), "marker_service"],
                          env=env, capture_output=True, timeout=60)
    assert done.returncode == 0 and (tmp_path / "ran").exists(), done.stderr


def test_a_momentary_probe_is_not_mistaken_for_a_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`airlock up` probes a broker's lock with a shared lock held for a moment (holder()); a
    broker starting at that instant must wait the probe out, not exit 78 (LockHeld), which the
    supervisor takes as a configuration refusal. The probe here ends at hold()'s first pause
    (no clock involved); a real holder, which never lets go, is still refused."""
    import fcntl
    path = tmp_path / "broker.lock"
    locks.hold(path, "broker").release()  # the file a broker of an earlier stack left
    probe = os.open(path, os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
    real_sleep, pauses = locks.time.sleep, []

    def probe_ends(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:
            os.close(probe)  # the probe's moment is over
        real_sleep(0)
    monkeypatch.setattr(locks.time, "sleep", probe_ends)
    held = locks.hold(path, "broker")
    assert pauses and sum(pauses) <= 0.5
    with pytest.raises(LockHeld):  # a real holder: refused after the few short tries
        locks.hold(path, "broker")
    assert sum(pauses) <= 0.5
    held.release()
