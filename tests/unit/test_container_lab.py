"""The container tests share an engine safely, proven without one: each run's names and
subnet are its own, and teardown touches only what that run started."""

from __future__ import annotations

import ipaddress
import random
import re
import subprocess
from pathlib import Path

import pytest

from tests.containers.lab import IMAGES, Lab, free_subnet, run_lab

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """Stands in for subprocess.run: records each command, answers with `code`."""

    def __init__(self, code: int = 0) -> None:
        self.commands: list[list[str]] = []
        self.code = code

    def __call__(self, command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        return subprocess.CompletedProcess(command, self.code, "", "")

    def compose(self) -> list[list[str]]:
        return [c for c in self.commands if "-p" in c]


class FakeImages:
    def __init__(self) -> None:
        self.removed: list[tuple[str, bool]] = []

    def remove(self, reference: str, noprune: bool = False) -> None:
        self.removed.append((reference, noprune))


class FakeClient:
    def __init__(self) -> None:
        self.images, self.closed = FakeImages(), False

    def close(self) -> None:
        self.closed = True


def test_two_runs_get_their_own_names_tag_subnet_and_bridges(tmp_path: Path) -> None:
    """A second lab, told what the first uses, differs from it in every name and in its subnet."""
    first = Lab.fresh(tmp_path / "a")
    used = [ipaddress.ip_network(f"{first.subnet}.0/24")]
    second = Lab.fresh(tmp_path / "b", used, {first.project, *first.bridges})
    assert first.project != second.project and first.tag != second.tag
    assert first.subnet != second.subnet and not set(first.bridges) & set(second.bridges)
    assert first.env["AIRLOCK_TAG"] == first.tag and first.env["AIRLOCK_SUBNET"] == first.subnet
    for lab in (first, second):
        assert lab.project.startswith("airlocktest") and lab.tag != "latest"
        assert all(b.startswith("al-") and len(b) <= 15 for b in lab.bridges)  # the firewall's prefix; Linux's limit


def test_the_lab_runs_from_a_fresh_clone_without_local_state(tmp_path: Path) -> None:
    """The copy holds the tracked files, and no virtualenv, data or keys of this checkout."""
    lab = Lab.fresh(tmp_path)
    assert (lab.folder / "compose.yaml").read_bytes() == (ROOT / "compose.yaml").read_bytes()
    assert (lab.folder / "samples" / "seed_4411_de.eml").is_file()
    assert not any((lab.folder / name).exists() for name in (".venv", ".git", "airlock-data", "airlock-keys"))
    assert lab.data == lab.folder / "airlock-data" and lab.key_folder == lab.folder / "airlock-keys"


def test_the_host_cli_gets_no_key_or_data_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exports from the caller's shell are dropped, so the tests follow docs/compose.md literally."""
    for key in ("AIRLOCK_KEYS", "AIRLOCK_DATA_DIR", "AIRLOCK_KEYS_DIR", "COMPOSE_PROJECT_NAME", "AIRLOCK_TAG"):
        monkeypatch.setenv(key, "/somewhere/else")
    monkeypatch.setenv("AIRLOCK_BASE", "airlock/base:bookworm")
    lab = Lab.fresh(tmp_path)
    assert not {"AIRLOCK_KEYS", "AIRLOCK_DATA_DIR", "AIRLOCK_KEYS_DIR", "COMPOSE_PROJECT_NAME"} & set(lab.env)
    assert lab.env["AIRLOCK_TAG"] == lab.tag and lab.env["AIRLOCK_BASE"] == "airlock/base:bookworm"


def test_free_subnet_avoids_every_used_network() -> None:
    """Whatever is taken (a docker network, a host route, a bigger block), the pick overlaps none of it."""
    used = [ipaddress.ip_network("172.31.240.0/28"), ipaddress.ip_network("172.31.0.0/17"),
            ipaddress.ip_network("fd00::/64")]
    rng = random.Random(7)
    for _ in range(50):
        picked = ipaddress.IPv4Network(f"{free_subnet(used, rng)}.0/24")
        assert not any(picked.overlaps(u) for u in used if u.version == 4)
        assert picked.subnet_of(ipaddress.IPv4Network("172.31.0.0/16"))


def test_free_subnet_says_when_nothing_is_left() -> None:
    """A full pool is a clear error, not an overlapping guess."""
    with pytest.raises(RuntimeError, match="no free /24"):
        free_subnet([ipaddress.ip_network("172.31.0.0/16")], random.Random(1))


def test_run_lab_never_takes_down_before_its_own_up(tmp_path: Path) -> None:
    """The first compose command is `up`; every command names this run's project; `down` comes last."""
    recorder, client = Recorder(), FakeClient()
    lab = Lab(tmp_path, "abcde", "172.31.9", runner=recorder)
    lab.wait_healthy = lambda service, timeout_s=0: None  # type: ignore[method-assign]  # no engine here
    lab.wait_connected = lambda timeout_s=0: None  # type: ignore[method-assign]  # no engine here
    session = run_lab(lab, lambda: client)
    assert next(session) is lab
    assert [c[c.index("-p") + 2] for c in recorder.compose()] == ["up"]
    with pytest.raises(StopIteration):
        next(session)
    actions = [c[c.index("-p") + 1:c.index("-p") + 3] for c in recorder.compose()]
    assert actions == [["airlocktestabcde", "up"], ["airlocktestabcde", "down"]]
    assert client.images.removed == [(f"airlock/{name}:test-abcde", True) for name in IMAGES] and client.closed


def test_a_failed_up_still_cleans_only_its_own_project(tmp_path: Path) -> None:
    """`up` fails half-way: its own project is taken down, its own tags removed, the failure reported."""
    recorder, client = Recorder(code=1), FakeClient()
    lab = Lab(tmp_path, "12345", "172.31.9", runner=recorder)
    with pytest.raises(AssertionError):
        next(run_lab(lab, lambda: client))
    assert [c[c.index("-p") + 1:c.index("-p") + 3] for c in recorder.compose()] == [
        ["airlocktest12345", "up"], ["airlocktest12345", "down"]]
    assert all(ref.endswith(":test-12345") for ref, _ in client.images.removed)


def test_nothing_started_nothing_taken_down(tmp_path: Path) -> None:
    """Closed before it ever ran `up`, a lab issues no compose command at all."""
    recorder = Recorder()
    lab = Lab(tmp_path, "00000", "172.31.9", runner=recorder)
    session = run_lab(lab, FakeClient)
    session.close()  # never started
    assert recorder.commands == []


def test_compose_file_takes_the_subnet_and_bridge_names_from_variables() -> None:
    """No fixed address or bridge name is left in compose.yaml: each comes from AIRLOCK_SUBNET / AIRLOCK_BRIDGE."""
    text = "\n".join(line for line in (ROOT / "compose.yaml").read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    assert "172.31.240" not in text.replace("${AIRLOCK_SUBNET:-172.31.240}", "")
    bridges = re.findall(r"com\.docker\.network\.bridge\.name: \"(.*)\"", text)
    assert len(bridges) == 7 and all(b.startswith("al-${AIRLOCK_BRIDGE:-}") for b in bridges)
    longest = max(len(b.replace("${AIRLOCK_BRIDGE:-}", "abcde-")) for b in bridges)
    assert longest <= 15


class OverlapOnce(Recorder):
    """The first `up` meets a network another run created a moment earlier on the same /24."""

    def __call__(self, command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        done = super().__call__(command, **kwargs)
        if "up" in command and sum("up" in c for c in self.commands) == 1:
            return subprocess.CompletedProcess(command, 1, "", "Pool overlaps with other one on this address space")
        return done


class ClientWithNetworks(FakeClient):
    def __init__(self, subnet: str) -> None:
        super().__init__()

        class Networks:
            @staticmethod
            def list() -> list:
                return [type("N", (), {"attrs": {"IPAM": {"Config": [{"Subnet": f"{subnet}.0/24"}]}}})()]

        self.networks = Networks()


def test_a_subnet_taken_meanwhile_is_replaced_and_only_its_own_project_cleaned(tmp_path: Path) -> None:
    """`up` fails on an overlapping pool: down its own project, take another free /24, up again."""
    recorder = OverlapOnce()
    lab = Lab(tmp_path, "fedcb", "172.31.9", runner=recorder)
    lab.wait_healthy = lambda service, timeout_s=0: None  # type: ignore[method-assign]  # no engine here
    lab.wait_connected = lambda timeout_s=0: None  # type: ignore[method-assign]  # no engine here
    session = run_lab(lab, lambda: ClientWithNetworks("172.31.9"))
    next(session)
    session.close()
    actions = [c[c.index("-p") + 1:c.index("-p") + 3] for c in recorder.compose()]
    assert actions == [["airlocktestfedcb", a] for a in ("up", "down", "up", "down")]
    assert lab.subnet != "172.31.9" and lab.env["AIRLOCK_SUBNET"] == lab.subnet
