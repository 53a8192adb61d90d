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
      <role>.key[_secret], allow/ host user: the host CLI authenticates with these
      services/<service>/         the services' user, group the host's, 0770: each container
                                  mounts only its own and reads its secret as that user;
                                  the host user (through the group) can still delete it
    airlock-data/                 the services' user, group the host's, 0775: the services
                                  write, the host user reads the trace and may clean up
                                  (no setgid bit: chmod would drop it, as root here is not
                                  in the host's group and holds no CAP_FSETID; not needed)

Every step is idempotent: a second `up` keeps the keys and only puts owners and modes back.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from airlock import keys, settings as settings_module
from airlock.errors import ConfigError

PROJECT, DATA, LAB_KEYS = Path("/project"), Path("/data"), Path("/lab-keys")
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


def grants(key_folder: Path, data: Path, host: Owner, service: Owner) -> list[Grant]:
    """Owner and mode for every path the lab needs (see the module's docstring for why)."""
    shared = Owner(service.uid, host.gid)  # the services' user; the host user through the group
    planned = [Grant(key_folder, host, 0o700)]
    for path in sorted(key_folder.rglob("*")):
        if path.is_symlink():
            continue  # never follow a link out of the folder
        inside = path.relative_to(key_folder).parts
        serving = inside[0] == "services" and len(inside) > 1
        owner = shared if serving else host
        if path.is_dir():
            mode = 0o770 if serving else 0o755
        else:
            mode = (0o640 if serving else 0o600) if path.name.endswith(".key_secret") else 0o644
        planned.append(Grant(path, owner, mode))
    planned.append(Grant(data, shared, 0o775))
    for path in sorted(data.iterdir()) if data.is_dir() else []:
        # Files the services append to (trace.jsonl, journal.bin, calls.jsonl), perhaps made
        # by an earlier run as another user. Folders (run/, keys/ of `airlock up`) stay the host's.
        if path.is_file() and not path.is_symlink():
            planned.append(Grant(path, shared, stat.S_IMODE(path.stat().st_mode) | 0o660))
    return planned


def apply(planned: list[Grant]) -> None:
    for grant in planned:
        os.chown(grant.path, grant.owner.uid, grant.owner.gid, follow_symlinks=False)
        os.chmod(grant.path, grant.mode)


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
    apply(grants(key_folder, data, host, service))
    return (f"lab keys {made} in {key_folder}; host user {host.uid}:{host.gid} owns them, "
            f"services run as {service.uid}:{service.gid} and write {data}")


def main() -> int:
    # The host's names for the mounted folders (compose.yaml passes them), for messages the
    # user acts on: "remove ./airlock-keys", not a path inside this container.
    shown = os.environ.get("AIRLOCK_LAB_KEYS_SHOWN", str(LAB_KEYS))
    try:
        print(prepare(PROJECT, DATA, LAB_KEYS, service_owner(dict(os.environ))), flush=True)
    except keys.IncompleteKeys as exc:
        print(f"airlock lab init: {exc.describe(shown)}", file=sys.stderr)
        return 78  # EX_CONFIG: the services must not start on half-made keys
    except (ConfigError, OSError) as exc:  # SettingsError is a ConfigError
        print(f"airlock lab init: {exc}", file=sys.stderr)
        return 78
    return 0


if __name__ == "__main__":
    sys.exit(main())
