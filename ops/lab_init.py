"""The compose lab's one-shot `init` service: keys and folders, before any service starts.

`docker compose up` runs this first, every time; the other services wait for it to exit 0
(`condition: service_completed_successfully`). It runs as root in its own container (no
network, read-only root, only CHOWN, DAC_OVERRIDE and FOWNER) because it must hand folders
to two different users whatever the host user is, root included:

    /project   the project folder, read-only: its owner is the host user, who runs the
               host CLI (`airlock inject`, `airlock trace`)
    /data      the data folder (./airlock-data): written by the broker and the actor,
               which run as AIRLOCK_UID:AIRLOCK_GID (10001 unless set)
    /lab-keys  the key folder (./airlock-keys): made the first time, kept after

Who may do what, once this ran:

    airlock-keys/                 host user, 0700: no other host user gets in at all
      <role>.key[_secret], allow/ host user (folders 0700): the host CLI authenticates with these
      people/<name>.key[_secret]  host user (0700): one pair for each principal named in the
                                  project's tasks/principals.toml, so `airlock approve --by dana`
                                  on the host can decide (no service holds these)
      services/<service>/         the services' user, group the host's, 0770: each container
                                  mounts only its own and reads its secret as that user;
                                  the host user (through the group) can still delete it
    airlock-data/                 the services' user, group the host's, 01775: the services
                                  write, the host user reads the trace (no setgid bit:
                                  chmod would drop it, as root here is not in the host's
                                  group and holds no CAP_FSETID; not needed). Sticky, so the
                                  services cannot rename away the run/ and keys/ an `airlock
                                  up` here made as the host user; the cost: deleting the
                                  services' files there takes their uid or root
      trace.jsonl, calls.jsonl,   the services' user, group the host's, 0660 (owner's and
      pending.jsonl, journal.bin  group's rwx bits kept, none for others): made here if missing,
                                  as the services make theirs 0600, which the host could not read

The group is the project folder's, so every member of it may write the data folder and
rewrite the trace and the call log, which `airlock pending`, approve/deny and the graders
trust: where users share a primary group (often `users`), that is every local user. Give
the project folder a group of its own (or keep the checkout private) on a shared machine.

Every step is idempotent: a second `up` keeps the keys and only puts owners and modes back.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from airlock import keys, settings as settings_module
from airlock.errors import EX_CONFIG, ConfigError

PROJECT, DATA, LAB_KEYS = Path("/project"), Path("/data"), Path("/lab-keys")
# The files the services write in /data (the broker's trace and journal, the actor's call log
# and pending escalations). The services make theirs 0600 (airlock.files), which the host
# user could not read: made here first, they get the group's bits below and keep them.
DATA_FILES = ("trace.jsonl", "journal.bin", "calls.jsonl", "pending.jsonl", "broker.lock", "calls.lock")
# The people who may decide escalations, in the project the lab serves: each gets a key pair
# here (keys.make_people keeps any pair already made), as `airlock up` does for its task.
PRINCIPALS = Path("tasks") / "principals.toml"
SERVICE_IDS_DEFAULT = "10001"  # the uid and gid every service image and compose.yaml use


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int


@dataclass(frozen=True)
class Grant:
    path: Path
    owner: Owner
    mode: int
    folder: bool = False  # what grants() saw there: apply() touches nothing of another kind


def grants(key_folder: Path, data: Path, host: Owner, service: Owner) -> list[Grant]:
    """Owner and mode for every path the lab needs (see the module's docstring for why)."""
    shared = Owner(service.uid, host.gid)  # the services' user; the host user through the group
    planned = [Grant(key_folder, host, 0o700, folder=True)]
    for path in sorted(key_folder.rglob("*")):
        if path.is_symlink():
            continue  # never follow a link out of the folder
        inside = path.relative_to(key_folder).parts
        serving = inside[0] == "services" and len(inside) > 1
        owner = shared if serving else host
        if path.is_dir():
            mode = 0o770 if serving else 0o700
        else:
            mode = (0o640 if serving else 0o600) if path.name.endswith(".key_secret") else 0o644
        planned.append(Grant(path, owner, mode, folder=path.is_dir()))
    # Sticky (01775): the services may add files but not rename or delete what they do not
    # own, such as the run/ and keys/ an `airlock up` on this folder made as the host user.
    planned.append(Grant(data, shared, 0o1775, folder=True))
    for path in sorted(data.iterdir()) if data.is_dir() else []:
        # Files the services append to (trace.jsonl, journal.bin, calls.jsonl), perhaps made
        # by an earlier run as another user. Folders (run/, keys/ of `airlock up`) stay the host's.
        if path.is_file() and not path.is_symlink():
            # Only the owner's and group's rwx bits are kept: others' bits, and a setuid, setgid
            # or sticky bit someone set, are dropped (the files hold mail and customers' data).
            planned.append(Grant(path, shared, (stat.S_IMODE(path.stat().st_mode) & 0o770) | 0o660))
    return planned


def apply(planned: list[Grant]) -> list[Path]:
    """Set each grant's owner and mode through a descriptor opened with no link followed
    anywhere in its path; returns the paths skipped because they changed since grants().

    The services own /data and their key folders, so between grants() and here they can
    rename a link over an entry (or over a folder above one): a chown or chmod by path, as
    root with DAC_OVERRIDE and FOWNER, would then land on the link's target, /lab-keys'
    secrets included. Skipping such a path changes nothing its owner could not change anyway."""
    skipped = []
    for grant in planned:
        try:
            fd = _open_without_links(grant.path, grant.folder)
        except OSError:  # ELOOP, ENOTDIR, ENOENT: a link, or the entry is gone or replaced
            skipped.append(grant.path)
            continue
        try:
            if grant.folder or stat.S_ISREG(os.fstat(fd).st_mode):
                os.fchown(fd, grant.owner.uid, grant.owner.gid)
                os.fchmod(fd, grant.mode)  # after fchown, which clears setuid and setgid bits
            else:
                skipped.append(grant.path)  # a fifo or a socket where a file was: not ours to grant
        finally:
            os.close(fd)
    return skipped


def _open_without_links(path: Path, folder: bool) -> int:
    """A descriptor for `path`, walked one component at a time from / with O_NOFOLLOW, so a
    link anywhere in it fails (ELOOP or ENOTDIR) instead of being followed. O_NONBLOCK: a
    fifo swapped in does not hang the open; O_NOCTTY: a terminal does not become ours."""
    parts = path.absolute().parts
    parent = os.open(parts[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts[1:-1]:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            os.close(parent)
            parent = inner
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | (os.O_DIRECTORY if folder else 0)
        return os.open(parts[-1], flags, dir_fd=parent)
    finally:
        os.close(parent)


def make_data_files(data: Path) -> None:
    """Each of DATA_FILES that is missing, made empty (grants() then gives it its owner and
    mode). O_EXCL: an entry already there, a link the services planted included, is never
    opened, so nothing outside /data is made or touched."""
    folder = _open_without_links(data, folder=True)
    try:
        for name in DATA_FILES:
            try:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder))
            except FileExistsError:
                pass
    finally:
        os.close(folder)


def service_owner(env: dict[str, str]) -> Owner:
    read = settings_module.reader(env)
    return Owner(read("AIRLOCK_UID", _id, SERVICE_IDS_DEFAULT), read("AIRLOCK_GID", _id, SERVICE_IDS_DEFAULT))


def _id(text: str) -> int:
    # Not 0: compose.yaml passes the same value as every service's `user:`, so 0 would run
    # the services as root (or in root's group) and undo the separation this lab exists for.
    value = int(text)
    if not 1 <= value < 2**31:
        raise ValueError("must be a uid or gid other than root's, 1 or more")
    return value


def prepare(project: Path, data: Path, key_folder: Path, service: Owner) -> str:
    """Make or keep the keys, then set owners and modes; returns one line for the log."""
    info = project.stat()
    host = Owner(info.st_uid, info.st_gid)
    data.mkdir(parents=True, exist_ok=True)
    made = keys.ensure(key_folder)
    principals = project / PRINCIPALS
    people = keys.make_people(key_folder, keys.principal_names(principals)) if principals.is_file() else []
    make_data_files(data)
    skipped = apply(grants(key_folder, data, host, service))
    changed = f"; left alone, changed while this ran: {', '.join(map(str, skipped))}" if skipped else ""
    made += f", people's keys made for {', '.join(people)}" if people else ""
    return (f"lab keys {made} in {key_folder}; host user {host.uid}:{host.gid} owns them, "
            f"services run as {service.uid}:{service.gid} and write {data}{changed}")


def main() -> int:
    # The host's names for the mounted folders (compose.yaml passes them), for messages the
    # user acts on: "remove ./airlock-keys", not a path inside this container.
    shown = os.environ.get("AIRLOCK_LAB_KEYS_SHOWN", str(LAB_KEYS))
    try:
        print(prepare(PROJECT, DATA, LAB_KEYS, service_owner(dict(os.environ))), flush=True)
    except keys.IncompleteKeys as exc:
        print(f"airlock lab init: {exc.describe(shown)}", file=sys.stderr)
        return EX_CONFIG  # the services must not start on half-made keys
    except (ConfigError, OSError) as exc:  # SettingsError is a ConfigError
        print(f"airlock lab init: {exc}", file=sys.stderr)
        return EX_CONFIG
    return 0


if __name__ == "__main__":
    sys.exit(main())
