"""The compose lab's keys without Docker: made once and kept, owners and modes, and where the
host CLI finds them with no export."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

import pytest

from airlock import keys, settings
from airlock.client import IntakeClient
from airlock.errors import ConfigError, KeysMissing
from cli import runtime as cli
from ops import lab_init

HOST, SERVICE = lab_init.Owner(1000, 1000), lab_init.Owner(10001, 10001)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_ensure_makes_the_keys_once_and_keeps_them(tmp_path: Path) -> None:
    """A second run (a second `up`) keeps every key byte for byte."""
    folder = tmp_path / "airlock-keys"
    assert keys.ensure(folder) == "made"
    first = snapshot(folder)
    assert keys.ensure(folder) == "kept"
    assert snapshot(folder) == first


def test_each_service_folder_holds_only_its_own_secret(tmp_path: Path) -> None:
    """services/<service> holds the broker's public key and that service's secrets, nothing else."""
    folder = tmp_path / "k"
    keys.ensure(folder)
    for service, roles in keys.SERVICE_KEYS.items():
        own = folder / "services" / service
        assert {p.name for p in own.glob("*.key_secret")} == {f"{r}.key_secret" for r in roles}
        assert (own / "broker.key").read_bytes() == (folder / "broker.key").read_bytes()
        for secret in own.glob("*.key_secret"):
            assert secret.read_bytes() == (folder / secret.name).read_bytes()
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    allowed = folder / "services" / "broker" / "allow"
    assert {p.parent.name for p in allowed.glob("*/*.key")} == set(keys.ENDPOINT_ALLOWS)


def test_ensure_heals_derived_files_and_removes_stale_ones(tmp_path: Path) -> None:
    """A deleted copy comes back, a secret the policy no longer gives a service goes."""
    folder = tmp_path / "k"
    keys.ensure(folder)
    first = snapshot(folder)
    (folder / "services" / "reader" / "reader.key_secret").unlink()
    (folder / "services" / "reader" / "actor.key_secret").write_bytes((folder / "actor.key_secret").read_bytes())
    (folder / "allow" / "reader" / "stranger.key").write_text("x")
    (folder / "allow" / "retired-endpoint").mkdir()
    (folder / "services" / "retired-service").mkdir()
    (folder / "services" / "retired-service" / "actor.key_secret").write_text("x")
    assert keys.ensure(folder) == "kept"
    assert snapshot(folder) == first


def test_ensure_refuses_a_half_made_folder(tmp_path: Path) -> None:
    """Some pairs missing (an interrupted run): a clear error naming them, nothing replaced."""
    folder = tmp_path / "k"
    keys.ensure(folder)
    (folder / "validator.key_secret").unlink()
    before = snapshot(folder)
    with pytest.raises(ConfigError, match=r"incomplete \(missing validator.key_secret\).*remove that folder"):
        keys.ensure(folder)
    assert snapshot(folder) == before


def test_generate_still_refuses_to_overwrite(tmp_path: Path) -> None:
    """`airlock keys` keeps its contract: existing keys are replaced only when forced."""
    keys.generate(tmp_path)
    with pytest.raises(ConfigError, match="--force"):
        keys.generate(tmp_path)


def grants_by_path(key_folder: Path, data: Path) -> dict[str, lab_init.Grant]:
    return {str(g.path.relative_to(key_folder.parent)): g for g in lab_init.grants(key_folder, data, HOST, SERVICE)}


def test_owners_and_modes(tmp_path: Path) -> None:
    """The host user owns the keys folder (0700) and the client secrets; each service its own
    folder; the services the data."""
    folder, data = tmp_path / "airlock-keys", tmp_path / "airlock-data"
    keys.ensure(folder)
    data.mkdir()
    (data / "trace.jsonl").write_text("")
    (data / "keys").mkdir()  # what `airlock up` made: the host's, left alone
    got = grants_by_path(folder, data)
    shared = lab_init.Owner(SERVICE.uid, HOST.gid)
    assert (got["airlock-keys"].owner, got["airlock-keys"].mode) == (HOST, 0o700)
    assert (got["airlock-keys/intake.key_secret"].owner, got["airlock-keys/intake.key_secret"].mode) == (HOST, 0o600)
    assert got["airlock-keys/allow/intake/intake.key"].owner == HOST
    assert (got["airlock-keys/services/reader"].owner, got["airlock-keys/services/reader"].mode) == (shared, 0o770)
    secret = got["airlock-keys/services/reader/reader.key_secret"]
    assert (secret.owner, secret.mode) == (shared, 0o640)
    assert got["airlock-keys/services/broker/allow/reader/reader.key"].owner == shared
    # Sticky: the services may not rename the host's run/ or keys/ (airlock up's) out of the way.
    assert (got["airlock-data"].owner, got["airlock-data"].mode) == (shared, 0o1775)
    assert got["airlock-data/trace.jsonl"].owner == shared and got["airlock-data/trace.jsonl"].mode & 0o660 == 0o660
    assert "airlock-data/keys" not in got


def test_grants_never_follow_a_link(tmp_path: Path) -> None:
    """A symlink planted in the keys or data folder is never chowned or chmodded (root does this)."""
    folder, data = tmp_path / "airlock-keys", tmp_path / "airlock-data"
    keys.ensure(folder)
    data.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("")
    (folder / "services" / "link").symlink_to(outside)
    (data / "trace.jsonl").symlink_to(outside)
    assert not [g for g in lab_init.grants(folder, data, HOST, SERVICE) if g.path.is_symlink()]


def swap_for_a_link(path: Path, target: Path) -> None:
    """What a service does between grants() and apply(): rename a link over an entry it can write."""
    link = path.with_name(path.name + ".new")
    link.symlink_to(target)
    link.replace(path)


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid, info.st_mode


@pytest.mark.parametrize("swapped", [
    pytest.param("airlock-data/trace.jsonl", id="data-file"),
    pytest.param("airlock-keys/services/reader/reader.key_secret", id="service-secret"),
    pytest.param("airlock-keys/services/broker/allow", id="folder-above-a-granted-file"),
])
def test_apply_never_follows_a_link_swapped_in_after_grants(tmp_path: Path, swapped: str) -> None:
    """A link renamed over a granted path (or a folder above it) after grants() ran: apply()
    leaves the link's target as it was, owner and mode, setuid bit included."""
    me = lab_init.Owner(os.getuid(), os.getgid())
    folder, data = tmp_path / "airlock-keys", tmp_path / "airlock-data"
    keys.ensure(folder)
    data.mkdir()
    (data / "trace.jsonl").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "allow").mkdir()
    for name in ("trace.jsonl", "reader.key_secret", "allow/reader/reader.key"):
        (outside / name).parent.mkdir(parents=True, exist_ok=True)
        (outside / name).write_text("not the lab's")
        (outside / name).chmod(0o4700)
    (outside / "allow").chmod(0o700)
    planned = lab_init.grants(folder, data, me, me)
    before = {p: owner_and_mode(p) for p in [outside, *outside.rglob("*")]}
    path = tmp_path / swapped
    if path.is_dir():
        shutil.rmtree(path)
        swap_for_a_link(path, outside / "allow")
    else:
        swap_for_a_link(path, outside / path.name)
    lab_init.apply(planned)
    assert {p: owner_and_mode(p) for p in before} == before


def test_a_setuid_bit_on_a_data_file_is_dropped(tmp_path: Path) -> None:
    """A data file made setuid (by a service, or anyone) comes out 0o660 plus its owner's and
    group's rwx bits: no setuid, setgid or sticky bit, and nothing for others."""
    me = lab_init.Owner(os.getuid(), os.getgid())
    folder, data = tmp_path / "airlock-keys", tmp_path / "airlock-data"
    keys.ensure(folder)
    data.mkdir()
    (data / "calls.jsonl").write_text("")
    (data / "calls.jsonl").chmod(0o7755)
    lab_init.apply(lab_init.grants(folder, data, me, me))
    assert stat.S_IMODE((data / "calls.jsonl").stat().st_mode) == 0o770


def test_prepare_applies_them_and_is_idempotent(tmp_path: Path) -> None:
    """The init service's whole run, as this user: keys made, modes set; a second run keeps the keys."""
    me = lab_init.Owner(os.getuid(), os.getgid())
    project, data, folder = tmp_path, tmp_path / "airlock-data", tmp_path / "airlock-keys"
    assert "made" in lab_init.prepare(project, data, folder, me)
    first = snapshot(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(data.stat().st_mode) == 0o1775
    assert stat.S_IMODE((folder / "services" / "actor" / "actor.key_secret").stat().st_mode) == 0o640
    assert "kept" in lab_init.prepare(project, data, folder, me)
    assert snapshot(folder) == first


@pytest.mark.parametrize(("env", "error"), [
    ({"AIRLOCK_UID": "abc"}, "AIRLOCK_UID='abc' is invalid"),
    ({"AIRLOCK_GID": "-1"}, "AIRLOCK_GID='-1' is invalid"),
    pytest.param({"AIRLOCK_UID": "0"}, "AIRLOCK_UID='0' is invalid", id="root-uid"),
    pytest.param({"AIRLOCK_GID": "0"}, "AIRLOCK_GID='0' is invalid", id="root-gid"),
])
def test_service_owner_names_a_bad_setting(env: dict[str, str], error: str) -> None:
    """A uid that does not cast, or is root's (the same value is the services' `user:` in compose),
    is a SettingsError naming the variable, not a traceback."""
    with pytest.raises(ConfigError, match=error):
        lab_init.service_owner(env)


def test_service_owner_defaults_to_the_images_user() -> None:
    """Unset, the services' user is 10001:10001, as every target of the Dockerfile runs."""
    assert lab_init.service_owner({}) == lab_init.Owner(10001, 10001)


def lab_keys(folder: Path) -> Path:
    keys.ensure(folder)
    return folder


@pytest.mark.parametrize(("made", "env", "expected"), [
    pytest.param((), {}, None, id="none-anywhere"),
    pytest.param(("airlock-data/keys",), {}, "airlock-data/keys", id="airlock-up-keys"),
    pytest.param(("airlock-keys",), {}, "airlock-keys", id="compose-lab-keys-beside"),
    pytest.param(("airlock-keys", "airlock-data/keys"), {}, "airlock-keys", id="lab-wins-over-stale-up-keys"),
    pytest.param(("airlock-keys", "airlock-data/keys"), {"AIRLOCK_KEYS": "elsewhere"}, "elsewhere",
                 id="AIRLOCK_KEYS-wins"),
])
def test_where_the_cli_finds_its_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      made: tuple[str, ...], env: dict[str, str], expected: str | None) -> None:
    """AIRLOCK_KEYS, else the lab's airlock-keys beside the data dir, else <data-dir>/keys."""
    monkeypatch.chdir(tmp_path)
    for folder in made:
        lab_keys(tmp_path / folder)
    found = settings.load(env).keys_folder  # the default data dir, as in the repository
    assert found == (None if expected is None else Path(expected))


def test_a_lab_folder_without_keys_yet_is_not_used(tmp_path: Path) -> None:
    """An empty airlock-keys (compose made the mount point, init has not run) does not count."""
    (tmp_path / "airlock-keys").mkdir()
    assert settings.load({"AIRLOCK_DATA_DIR": str(tmp_path / "airlock-data")}).keys_folder is None


def test_the_lab_folder_follows_the_data_dir(tmp_path: Path) -> None:
    """--data-dir elsewhere: the lab's keys beside that folder are found."""
    folder = lab_keys(tmp_path / "lab" / "airlock-keys")
    assert settings.load({"AIRLOCK_DATA_DIR": str(tmp_path / "lab" / "airlock-data")}).keys_folder == folder


def deny_entries_of(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As for a second user in the checkout: ./airlock-keys is another user's, 0700, so the
    folder itself can be stat'ed but nothing in it (EACCES). Patched, as root would get in."""
    real_stat = Path.stat

    def stat_or_deny(path: Path, *, follow_symlinks: bool = True):
        if folder in path.parents:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_stat(path, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(Path, "stat", stat_or_deny)


def test_another_users_lab_keys_are_a_typed_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """./airlock-keys unreadable by this user: KeysMissing naming the folder and the uid, not a PermissionError."""
    folder = lab_keys(tmp_path / "airlock-keys")
    deny_entries_of(folder, monkeypatch)
    with pytest.raises(KeysMissing, match=rf"{folder} is not readable by uid {os.getuid()}"):
        settings.load({"AIRLOCK_DATA_DIR": str(tmp_path / "airlock-data")}).keys_folder  # noqa: B018  reading the property is what raises


def test_unreadable_AIRLOCK_KEYS_are_a_typed_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: N802  named after the setting, as written
    """AIRLOCK_KEYS naming a folder this user cannot read: the client's check says so, typed."""
    folder = lab_keys(tmp_path / "elsewhere")
    deny_entries_of(folder, monkeypatch)
    with pytest.raises(KeysMissing, match=rf"{folder} is not readable by uid {os.getuid()}"):
        IntakeClient(settings.load({"AIRLOCK_KEYS": str(folder)}), require_keys=True)


@pytest.mark.parametrize("command", [["status"], ["approve", "x-1", "--as", "support-lead", "--by", "dana"]])
def test_the_cli_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """The second user's `airlock status` or `approve`: exit 1 and one line, no traceback."""
    folder = lab_keys(tmp_path / "airlock-keys")
    deny_entries_of(folder, monkeypatch)
    monkeypatch.delenv("AIRLOCK_KEYS", raising=False)
    monkeypatch.setenv("AIRLOCK_DATA_DIR", str(tmp_path / "airlock-data"))
    assert cli.main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("airlock: ") and f"not readable by uid {os.getuid()}" in err and err.count("\n") == 1


def test_init_names_the_host_folder_when_keys_are_half_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 78 and a message naming ./airlock-keys (what the user removes), not the container's path."""
    folder = tmp_path / "lab-keys"
    keys.ensure(folder)
    (folder / "reader.key").unlink()
    monkeypatch.setattr(lab_init, "PROJECT", tmp_path)
    monkeypatch.setattr(lab_init, "DATA", tmp_path / "data")
    monkeypatch.setattr(lab_init, "LAB_KEYS", folder)
    monkeypatch.setenv("AIRLOCK_LAB_KEYS_SHOWN", "./airlock-keys")
    # The images' ids, not this user's: as root here 0 would be refused before the keys are checked.
    monkeypatch.setenv("AIRLOCK_UID", str(SERVICE.uid))
    monkeypatch.setenv("AIRLOCK_GID", str(SERVICE.gid))
    assert lab_init.main() == 78
    error = capsys.readouterr().err
    assert "the keys in ./airlock-keys are incomplete (missing reader.key)" in error and str(folder) not in error


def test_prepare_makes_the_principals_keys_so_the_host_can_approve(tmp_path: Path) -> None:
    """The lab's init makes a pair for each person in the project's tasks/principals.toml
    (host user's, 0600, in no service's folder), so `airlock approve --by dana` against the
    compose lab finds dana's key; a second run keeps it. Before, it made none: "no key for dana"."""
    me = lab_init.Owner(os.getuid(), os.getgid())
    project, data, folder = tmp_path / "project", tmp_path / "airlock-data", tmp_path / "airlock-keys"
    (project / "tasks").mkdir(parents=True)
    shutil.copy(Path(__file__).parents[2] / "tasks" / "principals.toml", project / "tasks" / "principals.toml")
    assert "people's keys made for dana, sam" in lab_init.prepare(project, data, folder, me)
    dana = keys.load(folder, keys.person("dana"))
    assert stat.S_IMODE((folder / "people" / "dana.key_secret").stat().st_mode) == 0o600
    sam = keys.load(folder, keys.person("sam"))
    assert keys.approvers(folder / "services" / "broker") == {dana.public.decode(): "dana", sam.public.decode(): "sam"}
    assert not list((folder / "services").glob("*/dana.key_secret"))
    assert "people's keys" not in lab_init.prepare(project, data, folder, me)
    assert keys.load(folder, keys.person("dana")) == dana
    # What `airlock approve` on the host uses: the lab's folder, found with no export.
    found = settings.load({"AIRLOCK_KEYS": str(folder)}).keys_folder
    assert found is not None and keys.load(found, keys.person("dana")) == dana


def test_prepare_refuses_a_broken_principals_file(tmp_path: Path) -> None:
    """A principals file that does not parse stops the init with its name, not a traceback."""
    me = lab_init.Owner(os.getuid(), os.getgid())
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "principals.toml").write_text("[[principals]\n")
    with pytest.raises(ConfigError, match="principals file .*principals.toml"):
        lab_init.prepare(tmp_path, tmp_path / "data", tmp_path / "keys", me)
