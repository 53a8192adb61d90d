"""Keys and data files are private from their first moment: secrets 0600 written atomically,
folders 0700, the journal, trace, call log and pending escalations 0600."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airlock import files, keys, trace
from ops import lab_init

LOOSE = 0o077  # any bit for the group or others


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a file made without a mode is 0644 and a folder 0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


class Watcher:
    """Looks at every file and folder under `root` on every audit event (each open, chmod,
    rename, mkdir...) while active: what another user could have opened at that moment."""

    def __init__(self, root: Path) -> None:
        self.root, self.active, self.busy = root, False, False
        self.seen: dict[str, int] = {}  # path -> the loosest mode it was ever seen with
        self.looks = 0

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active or self.busy:
            return
        self.busy = True  # the scan below raises audit events of its own
        try:
            self.looks += 1
            for here, folders, names in os.walk(self.root):
                for name in (*folders, *names):
                    path = os.path.join(here, name)
                    try:
                        mode = stat.S_IMODE(os.lstat(path).st_mode)
                    except FileNotFoundError:
                        continue
                    self.seen[path] = self.seen.get(path, 0) | mode
        finally:
            self.busy = False


_watchers: list[Watcher] = []


def _hook(event: str, args: tuple) -> None:
    for watcher in _watchers:
        watcher(event, args)


sys.addaudithook(_hook)  # audit hooks cannot be removed: one for the module, idle unless a watcher is active


@pytest.fixture
def watch(tmp_path: Path) -> Callable[[Callable[[], object]], Watcher]:
    def run(action: Callable[[], object]) -> Watcher:
        watcher = Watcher(tmp_path)
        _watchers.append(watcher)
        watcher.active = True
        try:
            action()
        finally:
            watcher.active = False
            _watchers.remove(watcher)
        return watcher

    return run


def test_generate_never_shows_a_secret_to_others(tmp_path: Path, umask_022: None, watch) -> None:
    """At every step of key generation (each open, chmod, rename), no secret key under the
    folder has a bit for the group or others: written 0600 from the first byte, not chmod-ed after."""
    watcher = watch(lambda: keys.generate(tmp_path / "data" / "keys"))
    secrets = {path: mode for path, mode in watcher.seen.items() if ".key_secret" in path}
    assert watcher.looks > 50 and len(secrets) >= 2 * len(keys.ROLES)  # the watcher really looked
    assert {path: oct(mode) for path, mode in secrets.items() if mode & LOOSE} == {}


def test_ensure_heals_a_secret_without_exposing_it(tmp_path: Path, umask_022: None, watch) -> None:
    """A service's copy of a secret rewritten by ensure() (after a change) is private throughout."""
    folder = tmp_path / "keys"
    keys.generate(folder)
    copy = folder / "services" / "actor" / "actor.key_secret"
    copy.write_bytes(b"stale")
    watcher = watch(lambda: keys.ensure(folder))
    assert copy.read_bytes() == (folder / "actor.key_secret").read_bytes()
    assert not watcher.seen[str(copy)] & LOOSE


def test_key_folders_are_0700_and_secrets_0600(tmp_path: Path, umask_022: None) -> None:
    """Every folder generate() makes, the data dir above the keys included, is 0700; every secret 0600."""
    folder = tmp_path / "data" / "keys"
    keys.generate(folder)
    made = [tmp_path / "data", folder, *(p for p in folder.rglob("*") if p.is_dir())]
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in made} == {str(p): "0o700" for p in made}
    secrets = list(folder.rglob("*.key_secret"))
    assert len(secrets) == len(keys.ROLES) + len(keys.SERVICE_KEYS)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in secrets)
    assert not list(folder.rglob(".*.tmp"))  # no scratch file left behind


def _writers() -> list:
    from actor.calllog import CallLog
    from actor.pending import PendingStore
    from broker.journal import Journal

    return [
        pytest.param(lambda path: trace.TraceWriter(path).close(), "trace.jsonl", id="trace"),
        pytest.param(lambda path: CallLog(path).close(), "calls.jsonl", id="calls"),
        pytest.param(lambda path: PendingStore(path).close(), "pending.jsonl", id="pending"),
        pytest.param(lambda path: Journal(path).close(), "journal.bin", id="journal"),
    ]


@pytest.mark.parametrize(("open_it", "name"), _writers())
def test_data_files_are_made_0600(tmp_path: Path, umask_022: None, open_it, name: str) -> None:
    """The trace, call log, pending escalations and journal are made 0600 in a 0700 data dir."""
    path = tmp_path / "data" / name
    open_it(path)
    assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o600"
    assert oct(stat.S_IMODE(path.parent.stat().st_mode)) == "0o700"


@pytest.mark.parametrize(("open_it", "name"), _writers())
def test_an_old_world_readable_data_file_is_closed_to_others(tmp_path: Path, open_it, name: str) -> None:
    """A data file an older version left 0666 loses the bits for others when opened; the
    group's stay (the compose lab's host user reads through them)."""
    path = tmp_path / name
    path.write_bytes(b"")
    path.chmod(0o666)
    open_it(path)
    assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o660"


def test_write_private_replaces_atomically(tmp_path: Path, umask_022: None) -> None:
    """write_private replaces a file (0644 before) with a 0600 one, by rename: the old inode is never rewritten."""
    path = tmp_path / "secret"
    path.write_bytes(b"old")
    before = path.stat().st_ino
    files.write_private(path, b"new")
    assert path.read_bytes() == b"new" and path.stat().st_ino != before
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_lab_init_makes_the_data_files_for_the_host_to_read(tmp_path: Path, umask_022: None) -> None:
    """The compose lab's init makes the data files the host CLI reads (trace, calls, pending)
    and the journal 0660 for the services' user and the host's group, none for others: the
    services would otherwise make them 0600, which the host user could not read."""
    me = lab_init.Owner(os.getuid(), os.getgid())
    data = tmp_path / "airlock-data"
    data.mkdir()
    (data / "trace.jsonl").write_bytes(b"")
    (data / "trace.jsonl").chmod(0o644)  # an older run's
    lab_init.prepare(tmp_path, data, tmp_path / "airlock-keys", me)
    modes = {name: oct(stat.S_IMODE((data / name).stat().st_mode)) for name in lab_init.DATA_FILES}
    assert modes == dict.fromkeys(("trace.jsonl", "calls.jsonl", "pending.jsonl", "journal.bin", "broker.lock",
                                   "calls.lock"), "0o660")
    trace.TraceWriter(data / "trace.jsonl").close()  # the broker's open keeps the group's bits
    assert stat.S_IMODE((data / "trace.jsonl").stat().st_mode) == 0o660


def test_airlock_up_makes_its_data_dir_0700(tmp_path: Path, umask_022: None) -> None:
    """The data dir `airlock up` makes (with run/ for its lock) is 0700, not the umask's 0755."""
    from airlock import locks

    with locks.one_stack(tmp_path / "data"):
        pass
    assert oct(stat.S_IMODE((tmp_path / "data").stat().st_mode)) == "0o700"
    assert oct(stat.S_IMODE((tmp_path / "data" / "run").stat().st_mode)) == "0o700"


def test_tighten_closes_an_old_key_folder_of_this_user(tmp_path: Path, umask_022: None) -> None:
    """A key folder an older version left 0755 is made 0700 (and said so); a closed one is left alone."""
    folder = tmp_path / "keys"
    keys.generate(folder)
    folder.chmod(0o755)
    assert keys.tighten(folder) is True
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert keys.tighten(folder) is False


def test_the_journal_opened_privately_still_drops_a_torn_tail(tmp_path: Path) -> None:
    """The journal's private open keeps its recovery: a torn last record is cut, the next follows whole ones."""
    from broker.journal import Journal, QueuedEmail, entries

    path = tmp_path / "journal.bin"
    journal = Journal(path)
    journal.append(QueuedEmail("a", b"x", "eml"))
    journal.close()
    with open(path, "ab") as file:
        file.write(b"\x00\x00\x00\x50torn")
    journal = Journal(path)
    journal.append(QueuedEmail("b", b"y", "eml"))
    journal.close()
    assert [entry.message_id for entry in entries(path)] == ["a", "b"]


@pytest.mark.parametrize("name", ["trace.jsonl", "calls.jsonl", "journal.bin"])
def test_a_data_file_planted_as_a_link_is_refused_not_followed(tmp_path: Path, name: str) -> None:
    """Whoever can write the data dir must not make airlock append to (and chmod) a file of
    its choosing: the link is refused with a typed error, and its target is untouched."""
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"someone else's file\n")
    target.chmod(0o644)
    data = tmp_path / "data"
    data.mkdir()
    (data / name).symlink_to(target)
    with pytest.raises(files.LinkedDataFile, match="symbolic link"):
        files.open_append(data / name)
    assert target.read_bytes() == b"someone else's file\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_journal_compaction_scratch_name_planted_as_a_link_truncates_nothing(tmp_path: Path) -> None:
    """The compaction's copy is written to journal.bin.compacting: a link planted there must
    be replaced, not followed (the old open truncated its target)."""
    from broker.journal import COMPACTING_SUFFIX, Journal, QueuedEmail

    target = tmp_path / "victim.txt"
    target.write_bytes(b"keep me\n")
    data = tmp_path / "data"
    journal = Journal(data / "journal.bin", compact_bytes=1)
    journal.append(QueuedEmail("m-1", b"Subject: a\n\nbody", "eml"))
    journal.append(QueuedEmail("m-2", b"Subject: b\n\nbody", "eml"))
    journal.sync()
    (data / ("journal.bin" + COMPACTING_SUFFIX)).symlink_to(target)
    journal.compact({"m-2"})
    journal.close()
    assert target.read_bytes() == b"keep me\n"
    assert not (data / ("journal.bin" + COMPACTING_SUFFIX)).exists()
