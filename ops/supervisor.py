"""`airlock up`: run the broker, validator, actor and N readers as child processes.

A child that dies is started again after a backoff that doubles up to a cap (and resets
once the child has stayed up a while); each restart is recorded in the trace. A child that
exits with 78 (EX_CONFIG) has refused its configuration: restarting cannot help, so the
whole stack stops and says why. SIGINT or SIGTERM stops every child, readers first and the
broker last, so the broker can record the others leaving.
The broker starts first, and the others once it has bound its endpoints; what `airlock up`
checks before that (free ports, extras, what an earlier stack left running) is in
preflight.py, and its lock on the data dir in locks.py.

Each child runs under ops.lifeline, so it dies with the supervisor (kill -9 included)
instead of serving on, unsupervised, beside the next stack. The supervisor itself must
outlive everything it watches: a pid file it cannot write (a full disk), a line it cannot
print, a child it cannot start, are each said (where saying is possible) and never stop
the stack; the child is tried again with its backoff, so the stack resumes by itself once
the cause is gone. A broker that does not answer is killed only when it is also making no
progress (its main thread's CPU time and I/O in /proc stand still): one recovering a long
trace is busy, not stuck.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import zmq

from airlock import keys, records, tracefiles
from airlock.client import IntakeClient
from airlock.errors import EX_CONFIG, BrokerUnreachable, ConfigError
from airlock.interpreter import python_command
from airlock.settings import Settings
from airlock.task import Task
from ops.preflight import own_file, own_folder

BACKOFF_FIRST_S = 0.5
STABLE_AFTER_S = 30.0  # a child up this long has its backoff reset
STOP_GRACE_S = 5.0
READY_TIMEOUT_S = 30.0
BROKER_SILENT_S = 20.0  # a broker silent, and with no CPU or I/O progress, this long is stuck
STACK_DUMP_S = 0.5  # time a stuck broker gets to print its stacks before it is killed
POLL_S = 0.2


@dataclass
class Child:
    name: str
    module: str
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff_s: float = BACKOFF_FIRST_S
    restart_at: float | None = None
    progress: tuple[int, ...] | None = None  # the last progress_mark seen ...
    progress_at: float = 0.0  # ... and when it last changed


class Supervisor:
    def __init__(self, settings: Settings, env: dict[str, str], readers: int, dashboard: bool = False) -> None:
        self.settings, self.env = settings, env
        self.run_dir = settings.data_dir / "run"
        self.children = [Child("broker", "broker"), Child("validator", "validator"), Child("actor", "actor")]
        self.children += [Child(f"reader-{n}", "reader") for n in range(1, readers + 1)]
        if dashboard:  # opt-in: the trainers' page, a reader of the trace like any other client
            self.children.append(Child("dashboard", "dashboard"))
        self._announce = print
        self._unwritten: dict[str, int] = {}  # pid files not written yet: name -> pid

    def _say(self, line: str) -> None:
        """Announce a line; stdout may be a file on the full disk, or a closed pipe: the
        stack must not stop because a line about it could not be printed."""
        try:
            self._announce(line)
        except (OSError, ValueError):  # ValueError: print to a closed file
            pass

    def _note_pid(self, name: str, pid: int) -> None:
        """run/<name>.pid, for whoever wants to signal one service. Bookkeeping only: a
        failure (ENOSPC, EIO, a planted link) is said once and tried again each turn of
        _watch until a write succeeds; meanwhile no file names the pid it replaced (an
        unlink frees space, so it works on a full disk), so none names a wrong process."""
        path = self.run_dir / f"{name}.pid"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, f"{pid}\n")
        except (OSError, ConfigError) as exc:
            if not isinstance(exc, ConfigError):  # run/ is ours, not a link planted elsewhere
                _remove(path)
            if name not in self._unwritten:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self._say(f"airlock: cannot write {path}: {why}; carrying on without it, trying again")
            self._unwritten[name] = pid
        else:
            self._unwritten.pop(name, None)

    def run(self, stop: threading.Event, announce=print) -> int:
        self._announce, announce = announce, self._say
        self._note_pid("up", os.getpid())
        client = IntakeClient(self.settings, timeout_s=1.0, role=keys.SUPERVISOR_ROLE)  # its restarts: its key only
        try:
            code = self._start_broker(stop, announce)
            if code is None:
                for child in self.children[1:]:
                    self._start(child)
                code = self._wait_ready(stop, announce, client)
            while code is None and not stop.is_set():
                code = self._watch(client, announce)
                stop.wait(POLL_S)
            return code or 0
        finally:
            self._stop_all()
            client.close()
            _remove(self.run_dir / "up.pid")

    def _start(self, child: Child) -> None:
        """Start `child` under a lifeline to this process. A start that fails (no memory, no
        process slots) is a crash like any other: tried again after the backoff."""
        child.started, child.restart_at, child.progress, child.progress_at = time.monotonic(), None, None, 0.0
        try:
            child.process = subprocess.Popen(
                python_command("-m", "ops.lifeline", str(os.getpid()), child.module), env=self.env)
        except OSError as exc:
            child.process = None
            child.restart_at = child.started + child.backoff_s
            self._say(f"airlock: cannot start {child.name}: {exc.strerror or exc}; "
                      f"trying again in {child.backoff_s:.1f} s")
            child.backoff_s = min(child.backoff_s * 2, self.settings.restart_backoff_max_s)
            return
        self._note_pid(child.name, child.process.pid)

    def _start_broker(self, stop: threading.Event, announce) -> int | None:
        """The broker first, and the others only once it has bound its endpoints (its
        `started` trace line, written right after the binds): a broker that cannot bind
        exits 78 and the stack stops with no worker started, so none ever connects to
        whatever else holds the port. A broker slow to start is left to _wait_ready."""
        broker = self.children[0]
        path = self.settings.trace_path
        try:
            since = tracefiles.mark(path)  # the live file and its size: it may become a segment
        except OSError:  # unreadable (EIO): any `started` line is new
            since = None, 0
        self._start(broker)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not stop.is_set() and time.monotonic() < deadline:
            if broker.process is None:
                return None  # it could not be started: _watch tries again, with backoff
            code = broker.process.poll()
            if code == EX_CONFIG:
                announce("airlock: broker refused its configuration (see above); stopping")
                return EX_CONFIG
            if code is not None or _broker_started_since(path, since):
                return None  # a crash is _watch's to restart, with backoff
            stop.wait(POLL_S)
        return None

    def _wait_ready(self, stop: threading.Event, announce, client: IntakeClient) -> int | None:
        """Until every role has connected (however long a busy machine takes), then say so."""
        slow_after: float | None = time.monotonic() + READY_TIMEOUT_S
        while not stop.is_set():
            code = self._watch(client, announce)
            if code is not None:
                return code
            if slow_after is not None and time.monotonic() > slow_after:
                announce(f"airlock: services are not all connected after {READY_TIMEOUT_S:.0f} s; still trying")
                slow_after = None
            try:
                status = client.status()
            except BrokerUnreachable:
                self._unstick_broker(client, announce)
                continue
            broker = self.children[0].process
            if broker is None or broker.poll() is not None:
                stop.wait(POLL_S)
                continue  # whoever answered, it was not our broker: _watch sees it exited
            if all(status.workers.get(role, 0) >= 1 for role in ("reader", "validator", "actor")):
                announce(f"airlock is up: {status.workers['reader']} reader(s), validator, actor; "
                         f"pids in {self.run_dir}")
                return None
            stop.wait(POLL_S)
        return None

    def _unstick_broker(self, client: IntakeClient | None, announce) -> None:
        """A broker that is running, does not answer, and has made no progress for
        BROKER_SILENT_S is stuck (seen rarely on a loaded machine, before its first trace
        line): kill it, so _watch starts a fresh one with the usual backoff, and say so.
        Progress is what slowness cannot fake (progress_mark): a broker recovering a trace
        of many GB answers nothing for minutes, yet its CPU time and reads keep rising; a
        stopped or deadlocked one stands still. Where progress cannot be read (no /proc)
        the broker is never judged stuck: a false kill would keep a big stack down forever."""
        broker = self.children[0]
        if broker.process is None or broker.process.poll() is not None:
            return
        now = time.monotonic()
        mark = progress_mark(broker.process.pid)
        if mark is None or mark != broker.progress:
            broker.progress, broker.progress_at = mark, now
            return
        if now - broker.progress_at > BROKER_SILENT_S:
            # Each service dumps its threads' stacks to stderr on SIGUSR1 (service.main): the
            # stall is rare and not yet understood, so the next one shows where it stood.
            broker.process.send_signal(signal.SIGUSR1)
            time.sleep(STACK_DUMP_S)
            announce(f"airlock: the broker has not answered and made no progress (CPU, I/O) in "
                     f"{BROKER_SILENT_S:.0f} s; restarting it (its threads' stacks are above)")
            broker.process.kill()
            broker.process.wait()

    def _watch(self, client: IntakeClient, announce) -> int | None:
        """Restart children that died; return an exit code if the stack must stop."""
        for name, pid in list(self._unwritten.items()):  # the disk may have room again
            process = next((c.process for c in self.children if c.name == name), None)
            if name != "up" and (process is None or process.pid != pid or process.poll() is not None):
                del self._unwritten[name]  # that process is gone: its restart writes its own
            else:
                self._note_pid(name, pid)
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._start(child)
                continue
            code = child.process.poll() if child.process else None
            if code is None:
                continue
            if code == EX_CONFIG:
                announce(f"airlock: {child.name} refused its configuration (see above); stopping")
                return EX_CONFIG
            if now - child.started >= STABLE_AFTER_S:
                child.backoff_s = BACKOFF_FIRST_S
            child.restart_at = now + child.backoff_s
            announce(f"airlock: {child.name} exited with {code}; restarting in {child.backoff_s:.1f} s")
            try:
                client.notice("service_restarted", service=child.name, exit_code=code, backoff_s=child.backoff_s)
            except zmq.ZMQError:  # a broker that is not there cannot record it; the line above said it
                pass
            child.backoff_s = min(child.backoff_s * 2, self.settings.restart_backoff_max_s)
        return None

    def _stop_all(self) -> None:
        running = [(c.name, c.process) for c in reversed(self.children) if c.process and c.process.poll() is None]
        others = [process for name, process in running if name != "broker"]
        for process in others:
            process.send_signal(signal.SIGTERM)
        self._reap(others)
        broker = [process for name, process in running if name == "broker"]  # the last to stop
        for process in broker:
            process.send_signal(signal.SIGTERM)
        self._reap(broker)
        for child in self.children:
            _remove(self.run_dir / f"{child.name}.pid")

    @staticmethod
    def _reap(processes: list[subprocess.Popen[bytes]]) -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _broker_started_since(trace_path: Path, since: tracefiles.Mark) -> bool:
    """Whether the trace has a broker `started` line after `since` (the live file closed
    into a segment meanwhile included). The lock keeps out
    a second `airlock up`, not every writer: the compose lab's broker appends to the same
    ./airlock-data/trace.jsonl, so a `started` line can be that broker's. The others may then
    start before this broker has bound; check_ports before it, and _wait_ready counting an
    answer only while this broker's process is alive, are what cover that case."""
    try:
        new = tracefiles.lines_since(trace_path, since)
    except OSError:  # unreadable (EIO): no sign of a start
        return False
    # A broker's Started record (records.decode checks its stage); lines_since gives whole lines only.
    return any(isinstance(records.decode(line), records.Started) for line in new)


def progress_mark(pid: int) -> tuple[int, ...] | None:
    """What the main thread of process `pid` has done so far, in amounts that only rise
    with work: its CPU ticks (utime + stime) and the bytes it asked to read and write
    (rchar, wchar), from /proc/<pid>/task/<pid>/. Equal marks a while apart: it did nothing
    meanwhile. The main thread's, not the process's: the broker's loop and its recovery run
    there, while libzmq's I/O threads and the CURVE authenticator's thread would keep
    answering peers' heartbeats for a main thread that is deadlocked.
    None where /proc cannot say (not Linux, or the process is gone)."""
    task = Path(f"/proc/{pid}/task/{pid}")
    try:
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        mark = [int(fields[11]) + int(fields[12])]  # utime, stime: fields 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return None
    try:
        io = dict(line.split(":", 1) for line in (task / "io").read_text().splitlines())
        mark += [int(io["rchar"]), int(io["wchar"])]
    except (OSError, KeyError, ValueError):  # /proc/<pid>/io may be closed to us: CPU alone then
        pass
    return tuple(mark)


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a pid file left behind names a dead pid: preflight checks the pid, not the file
        pass


def _write_atomically(path: Path, text: str) -> None:
    """Readers of a pid file never see it half written. The run folder may sit in a data dir
    others write (preflight.own_folder says why): a link planted there is not followed."""
    folder = own_folder(path.parent)
    try:
        temporary = path.with_name(path.name + ".tmp")
        fd = own_file(folder, temporary)
        with os.fdopen(fd, "w") as file:
            file.truncate(0)
            file.write(text)
        os.replace(temporary.name, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)


def child_env(settings: Settings, base: dict[str, str]) -> dict[str, str]:
    """The environment every child gets: absolute paths, so children may run from anywhere."""
    env = dict(base)
    env["AIRLOCK_DATA_DIR"] = str(settings.data_dir.resolve())
    env["AIRLOCK_TASK"] = str(settings.task.resolve())
    env["AIRLOCK_MODEL_URL"] = settings.model_url or ""
    if settings.keys_folder is not None:
        env["AIRLOCK_KEYS"] = str(settings.keys_folder.resolve())
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, base.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def check_config(settings: Settings) -> Task:
    """Fail before starting anything if the task file is bad (services would refuse it too)."""
    from airlock import task as task_module

    return task_module.load(settings.task)
