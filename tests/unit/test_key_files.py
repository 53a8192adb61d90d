"""A damaged CURVE key file: one line naming it (ConfigError, exit 78), never a traceback or a
socket error a restart would meet again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlock import keys
from airlock.errors import EX_CONFIG, ConfigError
from tests.conftest import ROOT, airlock_env


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("keys") / "keys"
    keys.generate(folder)
    return folder


@pytest.mark.parametrize("role", ["actor", "broker"])
def test_every_byte_flipped_in_a_secret_key_file_is_a_config_error_or_changes_nothing(made: Path, role: str,
                                                                                    tmp_path: Path) -> None:
    """Each byte of a secret key file flipped (four ways): load() gives the same pair (a byte in
    a comment) or a ConfigError naming the file; never another exception, never a wrong pair."""
    original = (made / f"{role}.key_secret").read_bytes()
    pair = keys.load(made, role)
    damaged = tmp_path / f"{role}.key_secret"
    others: dict[str, int] = {}
    wrong: list[tuple[int, int]] = []
    for position in range(len(original)):
        for mask in (0x01, 0x20, 0x80, 0xFF):
            data = bytearray(original)
            data[position] ^= mask
            damaged.write_bytes(bytes(data))
            try:
                found = keys.load(tmp_path, role)
            except ConfigError as exc:
                assert str(damaged) in str(exc) and "\n" not in str(exc), str(exc)
                continue
            except Exception as exc:  # noqa: BLE001  counted: the test names what escaped
                others[f"{type(exc).__name__}: {exc}"[:80]] = others.get(f"{type(exc).__name__}: {exc}"[:80], 0) + 1
                continue
            if found != pair:
                wrong.append((position, mask))
    assert others == {} and wrong == []


def test_a_service_with_a_damaged_key_file_exits_78_with_one_line(made: Path, tmp_path: Path) -> None:
    """`python -m actor` whose secret key holds a character z85 does not have: exit 78 (the
    supervisor does not restart it), one line on stderr naming the file."""
    folder = tmp_path / "keys"
    folder.mkdir()
    for name in ("actor.key_secret", "broker.key"):
        (folder / name).write_bytes((made / name).read_bytes())
    text = (folder / "actor.key_secret").read_bytes()
    start = text.index(b'secret-key = "') + len(b'secret-key = "')
    (folder / "actor.key_secret").write_bytes(text[:start] + b"~" + text[start + 1:])
    env = {**os.environ, **airlock_env(tmp_path / "data"), "AIRLOCK_KEYS": str(folder), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "actor"], env=env, capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == EX_CONFIG, done.stderr
    assert done.stderr.count("\n") == 1 and "actor.key_secret" in done.stderr, done.stderr


def test_a_damaged_public_key_in_an_allow_list_is_a_config_error(made: Path, tmp_path: Path) -> None:
    """The broker reads every allow list before its authenticator does: a damaged file there
    is one line naming it, not a traceback from pyzmq's parser."""
    folder = tmp_path / "allow" / "actor"
    folder.mkdir(parents=True)
    text = (made / "actor.key").read_bytes()
    (folder / "actor.key").write_bytes(text.replace(b'public-key = "', b'public-key = "\xff'))
    with pytest.raises(ConfigError, match=r"actor\.key"):
        keys.check_allowed(folder)
