"""Checks `airlock up` makes before it starts a child, each naming the cause and the fix.

- One stack per data dir is airlock.locks' (`locks.one_stack`, the broker's own lock);
  `check_left_running` names what an earlier stack left running here: a broker holding
  its lock, or a child a pid file names (where children cannot die with their supervisor).
- `own_folder`, `own_file`: run/ and the files `up` writes there, opened without following a
  link and used only if this user owns them (others may write the data dir).
- `check_ports`: every port free, else ConfigError (exit 78) naming port and setting.
- `model_silence`: whether the model URL answers at all, in a short probe; a warning for
  the banner, never a refusal (recorded answers still work, and a model may start later).
- `model_slots`: how many requests the model serves at once (llama.cpp's /props), for the
  number of readers.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path
from typing import Annotated

import msgspec

from airlock import bindhosts, httpdeadline, locks
from airlock.errors import AlreadyRunning, ConfigError
from airlock.settings import PORT_IN_USE_HINT, Settings, model_api_url, model_server_root

PROBE_TIMEOUT_S = 2.0  # a model that takes longer to accept a GET is as good as absent at start

def models_url(base: str) -> str:
    """The OpenAI-compatible model list next to the chat endpoint the reader will use."""
    return model_api_url(base, "models")


def model_silence(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None if something answers HTTP at the model URL (any status: a server that lacks
    /v1/models still serves chat), else why not, e.g. "connection refused". The probe is
    held to its timeout whatever the server does (airlock.httpdeadline)."""
    answer = httpdeadline.request("GET", models_url(url), timeout_s)
    if isinstance(answer, httpdeadline.Answered):
        return None
    match answer.kind:
        case "refused":
            return "connection refused"
        case "timeout":
            return f"no answer within {timeout_s:g} s"
    return answer.detail


class _Slots(msgspec.Struct):
    total_slots: Annotated[int, msgspec.Meta(ge=1, le=4096)]


MAX_AUTO_READERS = 16  # readers chosen from a server's word, at most: --readers goes past it


def model_slots(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> int | None:
    """How many requests the model server serves at once, where it says (llama.cpp's GET
    /props); None for any other server, or none answering. `airlock up` starts that many
    readers unless --readers says otherwise: a reader holds one email while it asks, so
    readers = slots keeps a queue from forming in front of the model, where it would eat
    into each email's model timeout."""
    answer = httpdeadline.request("GET", model_server_root(url) + "/props", timeout_s, max_body_bytes=1024 * 1024)
    if not isinstance(answer, httpdeadline.Answered) or not 200 <= answer.status < 300 or not answer.body:
        return None
    try:
        return msgspec.json.decode(answer.body, type=_Slots).total_slots
    except msgspec.DecodeError:
        return None


def readers_for_slots(slots: int) -> tuple[int, str]:
    """The readers to start for a server that serves `slots` at once, and why: one each, at
    most MAX_AUTO_READERS (a server's word must not start a thousand processes). `airlock up`,
    `airlock attack` and `airlock bench` say it the same way."""
    readers = min(slots, MAX_AUTO_READERS)
    capped = f"; {readers} chosen, --readers for more" if slots > readers else ""
    return readers, f"the model serves {slots} at once{capped}"


# The data dir may be writable by others: the compose lab's ./airlock-data is the services'
# (uid 10001), and it is also `airlock up`'s default. Whatever they put there (run/ renamed
# and made again, up.lock a link to ~/.bashrc) must not be written with this user's rights,
# so run/ and the files in it are opened without following a link and used only if this
# user owns them.

def own_folder(path: Path) -> int:
    """A descriptor for the folder `path`, or ConfigError unless it is a folder (not a link to
    one) that this user owns."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ConfigError(f"{path} is not a folder of uid {os.getuid()}: a link, or not a folder") from None
        raise
    return _mine(fd, path, "folder")


def own_file(folder: int, path: Path) -> int:
    """A read-write descriptor for the regular file `path` in the open `folder`, made if
    missing (0644), or ConfigError if it is a link or not this user's. Never truncated here:
    truncate only once it is known to be ours."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(path.name, flags, 0o644, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{path} is not a file of uid {os.getuid()}: a link") from None
        raise
    return _mine(fd, path, "file")


def _mine(fd: int, path: Path, kind: str) -> int:
    info = os.fstat(fd)
    is_kind = stat.S_ISDIR(info.st_mode) if kind == "folder" else stat.S_ISREG(info.st_mode)
    if is_kind and info.st_uid == os.getuid():
        return fd
    os.close(fd)
    why = f"owned by uid {info.st_uid}" if is_kind else f"not a regular {kind}"
    raise ConfigError(f"{path} is not a {kind} of uid {os.getuid()}: {why} (remove it if you did not make it)")


def survivors(run_dir: Path) -> dict[str, int]:
    """Children an earlier `airlock up` on this data dir left running (it was killed with
    no chance to stop them, on a system where they cannot die with it): name -> pid. A
    broker is found by its lock, whoever started it; the others from their pid files, each
    still alive and still running that service (/proc/<pid>/cmdline, as `python -m NAME` or
    `python -m ops.lifeline NAME`, so a reused pid is not blamed; without /proc nothing
    is claimed). A new stack beside them would write the same trace."""
    found: dict[str, int] = {}
    broker = locks.holder(run_dir.parent / locks.BROKER_LOCK)
    if broker:  # 0: held by a broker whose pid its lock file does not name (check_left_running)
        found["broker"] = broker
    for pid_file in sorted(run_dir.glob("*.pid")):
        name = pid_file.stem
        module = "reader" if name.startswith("reader-") else name
        try:
            pid = int(pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if name != "up" and _runs(command, module.encode()):
            found.setdefault(name, pid)
    return found


def _runs(command: list[bytes], module: bytes) -> bool:
    """Whether a command line is `python -m MODULE ...` or `python -m ops.lifeline PID MODULE`."""
    for i, word in enumerate(command[:-1]):
        if word == b"-m":
            after = command[i + 1:]
            return after[0] == module or (after[0] == b"ops.lifeline" and after[2:3] == [module])
    return False


def check_left_running(run_dir: Path) -> None:
    """AlreadyRunning naming what an earlier, killed `airlock up` left running here."""
    left = survivors(run_dir)
    if "broker" not in left and locks.holder(run_dir.parent / locks.BROKER_LOCK) == 0:
        raise AlreadyRunning(f"a broker holds {run_dir.parent.resolve() / locks.BROKER_LOCK} (its pid is not "
                             "written there); stop it first")
    if left:
        listed = ", ".join(f"{name} (pid {pid})" for name, pid in left.items())
        raise AlreadyRunning(f"an earlier airlock up on {run_dir.parent.resolve()} was killed and left {listed} "
                             f"running; stop them first: kill {' '.join(map(str, left.values()))}")


def check_ports(settings: Settings, extra: dict[str, tuple[str, int]] | None = None) -> None:
    """ConfigError naming the first port something already listens on, before any child
    starts: a broker that cannot bind would only be started again and again. The broker
    still reports a bind it loses in a race (EX_CONFIG); this is the clear, early case."""
    bind_hosts = settings.with_bind_hosts_resolved().bind_hosts  # the addresses the broker will bind
    wanted = [(name, (host, number)) for name, number in settings.ports.items()
              for host in bindhosts.hosts(bind_hosts[name])]
    wanted += list((extra or {}).items())
    for name, (host, number) in wanted:
        host = "0.0.0.0" if host in ("*", "") else host  # noqa: PLW2901  the wildcard spelled as bind() needs it
        try:
            infos = socket.getaddrinfo(host, number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise ConfigError(f"cannot listen on {host}:{number} ({name}): {exc.strerror}") from None
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ and uvicorn bind
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        f"port {number} ({name}, AIRLOCK_{name.upper()}_PORT) on {host} is in use: "
                        f"{PORT_IN_USE_HINT}") from None
                raise ConfigError(f"cannot listen on {host}:{number} ({name}): {exc.strerror}") from None
