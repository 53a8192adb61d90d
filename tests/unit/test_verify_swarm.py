"""airlock verify --swarm, without a Docker engine: discovery from a stack's labels, the rules
for what swarm cannot set (each can FAIL), the GAP in the table and the exit code."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airlock.errors import EX_USAGE, UsageError
from cli import tools as lab_cli
from ops import verify, verify_swarm
from ops.verify import Check

STACK = "sdev"
GIB = 1 << 30
NETWORK_OF = {"edge": 0, "readers": 1, "model": 2, "validators": 3, "actors": 4}  # swarm.py's pinned subnets
SETID_FREE = {"NoNewPrivs": "0", "CapBnd": "0000000000000000", "CapEff": "0000000000000000", "setid": [],
              "unread": [], "keys": {}, "keyfiles": {}, "uid": 10001}
NOBODY = 65534  # the user the privileges probe runs as in a test run by root, who can read every folder


class FakeContainer:
    """A swarm task container as the docker SDK shows it; exec_run answers the privileges probe."""

    def __init__(self, service: str, slot: int = 1, stack: str = STACK, host: dict | None = None) -> None:
        self.id = f"{service}{slot}" + "0" * 58
        self.name = f"{stack}_{service}.{slot}.task{slot}"
        self.status = "running"
        self.labels = {verify_swarm.STACK_LABEL: stack, verify_swarm.SERVICE_LABEL: f"{stack}_{service}",
                       verify_swarm.TASK_LABEL: self.name}
        config = {"ReadonlyRootfs": True, "CapDrop": ["ALL"], "CapAdd": None, "Privileged": False,
                  "SecurityOpt": None, "PidsLimit": None, "Memory": 256 << 20, "MemorySwap": 512 << 20,
                  "NetworkMode": "default"}
        mounts = [{"Type": "tmpfs", "Source": "", "Destination": "/tmp", "RW": True}]
        if service in verify.DATA_WRITERS:
            mounts.append({"Type": "volume", "Name": f"{stack}_data", "Source": f"/var/lib/docker/volumes/{stack}_data",
                           "Destination": "/data", "RW": True})
        addresses = {f"{stack}_{n}": {"IPAddress": f"10.231.{NETWORK_OF[n]}.{10 + slot}"}
                     for n in sorted(verify.NETWORKS[service])}
        self.attrs: dict[str, Any] = {"Config": {"User": "10001:10001"}, "HostConfig": {**config, **(host or {})},
                                      "Mounts": mounts, "NetworkSettings": {"Networks": addresses}}
        keys = {} if service == "model" else {f"/keys/{service}.key": "ro,relatime"}
        self.seen: dict[str, Any] = {**SETID_FREE, "keys": keys, "keyfiles": {k: [0o400, 10001] for k in keys}}
        self.exec_users: list[str] = []
        self.answers: dict[tuple[str, int], str] = {}  # verify.PROBE's answer by (host, port); else timeout

    def reload(self) -> None:
        pass

    def exec_run(self, command: list[str], user: str = "") -> SimpleNamespace:
        self.exec_users.append(user)
        if command[2] == verify.PROBE:
            return SimpleNamespace(output=self.answers.get((command[3], int(command[4])), "timeout").encode(),
                                   exit_code=0)
        return SimpleNamespace(output=json.dumps(self.seen).encode(), exit_code=0)


def overlay(name: str, stack: str = STACK, **changes: Any) -> SimpleNamespace:
    number = NETWORK_OF[name]
    attrs = {"Name": f"{stack}_{name}", "Driver": "overlay", "Internal": name != "edge",
             "Options": {"encrypted": "true"}, "Labels": {verify_swarm.STACK_LABEL: stack},
             "IPAM": {"Config": [{"Subnet": f"10.231.{number}.0/24", "Gateway": f"10.231.{number}.1"}]}, **changes}
    return SimpleNamespace(name=attrs["Name"], attrs=attrs)


def gwbridge(containers: list[FakeContainer], masquerade: str = "true") -> SimpleNamespace:
    attrs = {"Name": "docker_gwbridge", "Options": {"com.docker.network.bridge.enable_ip_masquerade": masquerade},
             "IPAM": {"Config": [{"Subnet": "172.18.0.0/16", "Gateway": "172.18.0.1"}]},
             "Containers": {c.id: {"Name": f"gateway_{c.id[:12]}", "IPv4Address": f"172.18.0.{n}/16"}
                            for n, c in enumerate(containers, start=2)}}
    return SimpleNamespace(name="docker_gwbridge", attrs=attrs)


class FakeClient:
    """The SDK calls SwarmLab makes, with docker's label and name filters."""

    def __init__(self, containers: list[FakeContainer], networks: list[SimpleNamespace],
                 state: str = "active", api: str = "1.41", node_address: str = "192.0.2.2") -> None:
        self._containers, self._networks, self._state, self._api = containers, networks, state, api
        self.node_address = node_address
        self.containers = SimpleNamespace(list=self._list_containers)
        self.networks = SimpleNamespace(list=self._list_networks)

    def info(self) -> dict:
        return {"Swarm": {"LocalNodeState": self._state, "NodeAddr": self.node_address}}

    def version(self) -> dict:
        return {"ApiVersion": self._api}

    def _list_containers(self, filters: dict) -> list[FakeContainer]:
        key, _, value = filters["label"].partition("=")
        return [c for c in self._containers if c.labels.get(key) == value]

    def _list_networks(self, filters: dict | None = None, names: list[str] | None = None,
                       greedy: bool = False) -> list[SimpleNamespace]:
        if names is not None:  # docker matches names by substring
            return [n for n in self._networks if any(name in n.name for name in names)]
        key, _, value = (filters or {})["label"].partition("=")
        return [n for n in self._networks if (n.attrs.get("Labels") or {}).get(key) == value]


def the_stack(readers: int = 1, masquerade: str = "true", **host: object) -> tuple[FakeClient, list[FakeContainer]]:
    """The lab as `airlock swarm up` deploys it, on Docker 20.10, plus another stack's reader."""
    containers = [FakeContainer(service, slot, host=host) for service in verify.NETWORKS
                  for slot in range(1, (readers if service in ("reader", "model") else 1) + 1)]
    stranger = FakeContainer("reader", stack="other")
    on_edge = [c for c in containers if "edge" in verify.NETWORKS[c.labels[verify_swarm.SERVICE_LABEL][5:]]]
    networks = [overlay(name) for name in NETWORK_OF] + [overlay("edge", stack="other"), gwbridge(on_edge, masquerade)]
    return FakeClient(containers + [stranger], networks), containers


def test_discovery_names_services_and_networks_without_the_stack_prefix() -> None:
    """Task containers by the stack's labels, one per service (slot 1 if scaled); networks by the stack's names."""
    client, _ = the_stack(readers=2)
    lab = verify_swarm.SwarmLab(STACK, client)
    assert set(lab.containers) == set(verify.NETWORKS)
    assert [c.name for c in lab.replicas["reader"]] == ["sdev_reader.1.task1", "sdev_reader.2.task2"]
    assert lab.containers["reader"].name == "sdev_reader.1.task1"
    assert set(lab.networks) == set(NETWORK_OF) and lab.networks["edge"]["Name"] == "sdev_edge"
    assert lab.init is None and lab.api == (1, 41) and lab.node_address == "192.0.2.2"
    assert set(lab.logical_networks(lab.containers["broker"])) == verify.NETWORKS["broker"]
    assert lab.ip("reader", "readers") == "10.231.1.11" and lab.ip("reader", "actors") is None


def test_a_stack_name_that_prefixes_another_is_not_mixed_in() -> None:
    """Stack `sdev` does not pick up a service named by another stack, even under its label."""
    client, containers = the_stack()
    containers[0].labels[verify_swarm.SERVICE_LABEL] = "sdevx_broker"
    lab = verify_swarm.SwarmLab(STACK, client)
    assert "broker" not in lab.containers and "x_broker" not in lab.containers


def test_an_engine_in_no_swarm_is_a_usage_error() -> None:
    """verify --swarm on an engine that is in no swarm says so rather than finding nothing."""
    client, _ = the_stack()
    client._state = "inactive"
    with pytest.raises(UsageError, match="in no swarm"):
        verify_swarm.SwarmLab(STACK, client)


def test_an_empty_stack_is_a_usage_error() -> None:
    """A stack name with no running task containers names the stack."""
    client, _ = the_stack()
    with pytest.raises(UsageError, match="'nosuch'"):
        verify_swarm.run("nosuch", verify_swarm.SwarmLab("nosuch", client))


def test_host_addresses_are_the_gwbridge_gateway_and_the_node() -> None:
    """Only a container on docker_gwbridge is probed at its gateway; every one at the node's address."""
    client, _ = the_stack()
    lab = verify_swarm.SwarmLab(STACK, client)
    assert lab.gateways("intake") == ["172.18.0.1", "192.0.2.2"]
    assert lab.gateways("reader") == ["192.0.2.2"]
    assert lab.overlay_gateway("readers") == "10.231.1.1"


@pytest.mark.parametrize(("seen", "opts", "status"), [
    ({"NoNewPrivs": "1"}, [], "PASS"),
    ({"NoNewPrivs": "1", "setid": ["/usr/bin/su"]}, [], "PASS"),
    ({}, ["no-new-privileges:true"], "PASS"),
    ({}, [], "GAP"),
    ({"CapBnd": "00000000a80425fb"}, [], "FAIL"),
    ({"setid": ["/usr/bin/su"]}, [], "FAIL"),
    ({"CapBnd": ""}, [], "FAIL"),
], ids=["kernel-says-so", "kernel-says-so-despite-setuid", "security-opt", "compensated", "capabilities-left",
        "setuid-file", "unreadable"])
def test_no_new_privileges_is_a_gap_only_when_compensated(seen: dict, opts: list, status: str) -> None:
    """NoNewPrivs 1 passes; 0 is a GAP with an empty bounding set and no setuid/setgid file, else a FAIL."""
    got, reason = verify_swarm.no_new_privileges(opts, {**SETID_FREE, **seen})
    assert got == status
    assert "compensated" in reason if status == "GAP" else True


@pytest.mark.parametrize(("unread", "status"), [
    ([["/root", False, False], ["/etc/ssl/private", False, False]], "GAP"),
    ([["/data/x", False, True]], "FAIL"),
    ([["/opt/odd", True, False]], "FAIL"),
    ([["/root", False, False], ["/srv", True, True]], "FAIL"),
], ids=["unsearchable-skipped", "searchable-unlisted", "readable-unlisted", "one-of-each"])
def test_no_new_privileges_needs_a_complete_scan(unread: list, status: str) -> None:
    """A folder the service's user can neither read nor search is skipped (nothing under it can
    be exec'd by that user); one it could read or search but the scan could not list FAILs."""
    got, reason = verify_swarm.no_new_privileges([], {**SETID_FREE, "unread": unread})
    assert got == status
    if status == "GAP":
        assert "2 folders its user can neither read nor search skipped" in reason
    else:
        assert all(path in reason for path, readable, searchable in unread if readable or searchable)
        assert "/root" not in reason


def test_a_failed_no_new_privileges_names_the_setuid_files() -> None:
    """The reason names the first setuid files and counts the rest."""
    files = [f"/usr/bin/s{n}" for n in range(6)]
    _, reason = verify_swarm.no_new_privileges([], {**SETID_FREE, "setid": files})
    assert "/usr/bin/s0, /usr/bin/s1, /usr/bin/s2, /usr/bin/s3 and 2 more" in reason


@pytest.mark.parametrize(("limit", "api", "status"), [
    (64, (1, 41), "PASS"),
    (None, (1, 40), "FAIL"),
    (0, (1, 39), "FAIL"),
    (None, (1, 41), "FAIL"),
    (-1, (1, 45), "FAIL"),
])
def test_pids_limit_is_never_a_gap(limit: int | None, api: tuple, status: str) -> None:
    """Nothing stands in for a pids limit: unset FAILs, on an engine that cannot set one too."""
    assert verify_swarm.pids_limit({"HostConfig": {"PidsLimit": limit}}, api)[0] == status


def test_an_engine_too_old_for_a_pids_limit_says_upgrade() -> None:
    """Below API 1.41 the reason says the engine cannot set it and to upgrade."""
    status, reason = verify_swarm.pids_limit({"HostConfig": {"PidsLimit": None}}, (1, 40))
    assert status == "FAIL" and "cannot set it" in reason and "upgrade" in reason


@pytest.mark.parametrize(("memory", "swap", "status"), [
    (GIB, GIB, "PASS"),
    (GIB, 2 * GIB, "GAP"),
    (GIB, -1, "FAIL"),
    (GIB, 3 * GIB, "FAIL"),
    (0, 0, "FAIL"),
    (None, None, "FAIL"),
], ids=["no-swap", "docker-default", "unlimited-swap", "more-swap", "no-limit", "unset"])
def test_swap_is_a_gap_only_at_dockers_default(memory: int | None, swap: int | None, status: str) -> None:
    """Swarm has no swap setting, so docker's default (swap as much again) is a GAP; else short of equal FAILs."""
    assert verify_swarm.memory({"HostConfig": {"Memory": memory, "MemorySwap": swap}})[0] == status


@pytest.mark.parametrize(("name", "extra", "drop_data", "ok"), [
    ("broker", [], False, True),
    ("reader.2", [], False, True),
    ("actor", [], True, False),
    ("reader", [{"Type": "volume", "Source": "/v/sdev_data", "Destination": "/data"}], False, False),
    ("reader", [{"Type": "bind", "Source": "/x/keys/services/reader", "Destination": "/keys", "RW": False}],
     False, False),
    ("actor", [{"Type": "bind", "Source": "/var/run/docker.sock", "Destination": "/run/docker.sock"}], False, False),
], ids=["writer-with-volume", "scaled-reader", "writer-without-volume", "reader-with-data", "keys-bind", "socket"])
def test_swarm_mounts_are_tmpfs_and_the_data_volume(name: str, extra: list, drop_data: bool, ok: bool) -> None:
    """Keys come as secrets, so any bind of the host fails, /keys included; only writers hold the data volume."""
    attrs = FakeContainer(verify_swarm.service_of(name)).attrs
    if drop_data:
        attrs["Mounts"] = [m for m in attrs["Mounts"] if m["Destination"] != "/data"]
    attrs["Mounts"] += extra
    assert verify_swarm.mounts(name, attrs).ok is ok


def test_a_bind_at_data_fails_even_for_a_writer() -> None:
    """On a swarm the data folder is a named volume; a host path there is not the stack's."""
    attrs = FakeContainer("actor").attrs
    attrs["Mounts"][1] = {"Type": "bind", "Source": "/home/x/airlock-data", "Destination": "/data", "RW": True}
    check = verify_swarm.mounts("actor", attrs)
    assert not check.ok and "no data volume" in check.reason


@pytest.mark.parametrize(("name", "keys", "ok"), [
    ("reader", {"/keys/reader.key": "ro,relatime", "/keys/reader.key_secret": "ro"}, True),
    ("model", {}, True),
    ("reader", {"/keys/reader.key": "rw,relatime"}, False),
    ("reader", {}, False),
    ("model", {"/keys/x.key": "ro"}, False),
])
def test_keys_are_read_only_secrets(name: str, keys: dict, ok: bool) -> None:
    """Every mount under /keys is read-only; the model has none, every other service some."""
    files = {path: [0o400, 10001] for path in keys}
    assert verify_swarm.keys_read_only(name, {**SETID_FREE, "keys": keys, "keyfiles": files}).ok is ok


@pytest.mark.parametrize(("stat_of", "bad"), [
    ({"/keys/reader.key_secret": [0o444, 10001]}, "/keys/reader.key_secret"),
    ({"/keys/reader.key_secret": [0o400, 0]}, "/keys/reader.key_secret"),
    ({"/keys/reader.key_secret": [0o600, 10001]}, "/keys/reader.key_secret"),
    ({"/keys/reader.key_secret": None}, "/keys/reader.key_secret"),
    ({"/keys/other/x.key": [0o444, 0]}, "/keys/other/x.key"),
    ({"/keys/reader.key": "missing"}, "/keys/reader.key"),
], ids=["world-readable", "root-owned", "writable", "cannot-stat", "file-without-its-mount", "mount-not-stated"])
def test_each_key_file_is_0400_and_its_users(stat_of: dict, bad: str) -> None:
    """Each file under /keys, stat'ed from inside, is mode 0400 and owned by the container's uid;
    otherwise the check FAILs naming it."""
    keys = {"/keys/reader.key": "ro", "/keys/reader.key_secret": "ro"}
    files = {path: [0o400, 10001] for path in keys} | stat_of
    files = {path: found for path, found in files.items() if found != "missing"}
    check = verify_swarm.keys_read_only("reader", {**SETID_FREE, "keys": keys, "keyfiles": files})
    assert not check.ok and bad in check.reason


@pytest.mark.parametrize("output", ["", "Traceback (most recent call last):", "[]", '{"NoNewPrivs": "1"}'])
def test_a_privileges_probe_that_did_not_run_is_no_evidence(output: str) -> None:
    assert verify_swarm.privileges_seen(output) is None


def test_the_privileges_probe_finds_a_setuid_file(tmp_path: Path) -> None:
    """The probe reads this process 1's status and lists a setuid file under the root it walks, not a plain one."""
    (tmp_path / "bin").mkdir()
    for name, mode in (("su", 0o4755), ("ls", 0o755), ("wall", 0o2755)):
        (tmp_path / "bin" / name).write_bytes(b"")
        os.chmod(tmp_path / "bin" / name, mode)
    if not os.stat(tmp_path / "bin" / "su").st_mode & stat.S_ISUID:
        pytest.skip("this filesystem drops the setuid bit")
    done = subprocess.run([sys.executable, "-S", "-c", verify_swarm.PRIVILEGES, str(tmp_path)],
                          capture_output=True, text=True, check=True)
    seen = verify_swarm.privileges_seen(done.stdout)
    assert seen is not None and seen["NoNewPrivs"] in ("0", "1")
    assert seen["setid"] == [str(tmp_path / "bin" / "su"), str(tmp_path / "bin" / "wall")]


def python_for(uid: int) -> str | None:
    """A Python that `uid` may run (this one may sit in root's 0700 home), or None."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            subprocess.run([candidate, "-S", "-c", "pass"], user=uid, capture_output=True, check=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        return candidate
    return None


@pytest.fixture
def walked(tmp_path: Path) -> Iterator[tuple[Path, str, int | None]]:
    """A folder the probe's user may reach, a Python it may run, and that user when not this
    one: as root, which may read anything, nobody, in a folder of /tmp (pytest's is root's, 0700)."""
    if os.geteuid() != 0:
        yield tmp_path, sys.executable, None
        return
    python = python_for(NOBODY)
    if python is None:
        pytest.skip("no Python that nobody may run")
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        yield Path(folder), python, NOBODY


def test_the_privileges_probe_reports_the_folders_it_could_not_list(walked: tuple[Path, str, int | None]) -> None:
    """A folder the probe cannot list is reported with whether its user may read or search it,
    and each key file with its mode and owner."""
    base, python, user = walked
    top, keys = base / "top", base / "keys"
    for name, mode in (("open", 0o755), ("locked", 0o000), ("searchable", 0o111)):
        (top / name).mkdir(parents=True)
        (top / name / "f").write_bytes(b"")
        os.chmod(top / name, mode)
    keys.mkdir()
    (keys / "a.key").write_bytes(b"")
    os.chmod(keys / "a.key", 0o400)
    if user is not None:
        os.chown(keys / "a.key", user, user)
    try:
        done = subprocess.run([python, "-S", "-c", verify_swarm.PRIVILEGES, str(top), str(keys)],
                              capture_output=True, text=True, check=True, user=user)
    finally:
        for name in ("locked", "searchable"):
            os.chmod(top / name, 0o755)
    seen = verify_swarm.privileges_seen(done.stdout)
    assert seen is not None
    assert seen["unread"] == [[str(top / "locked"), False, False], [str(top / "searchable"), False, True]]
    assert seen["keyfiles"] == {str(keys / "a.key"): [0o400, os.getuid() if user is None else user]}
    assert seen["uid"] == (os.getuid() if user is None else user)


def test_the_privileges_probe_runs_as_the_containers_user() -> None:
    """Not as root: what the scan skips is then what the service's own user cannot reach."""
    client, containers = the_stack()
    verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client))
    assert {user for c in containers for user in c.exec_users} == {""}


def failing(checks: list[Check]) -> set[tuple[str, str]]:
    return {(c.service, c.name) for c in checks if c.status == "FAIL"}


EDGE_SERVICES = ("broker", "intake", "dashboard")


def probed(services: tuple[str, ...] = EDGE_SERVICES, outside: bool | None = True,
           host: bool | None = True) -> list[Check]:
    """The probe rows the edge's NAT is judged on, each passed (True), failed (False) or not run (None)."""
    rows = []
    for service in services:
        if outside is not None:
            rows.append(Check(service, "no route outside", outside, "r"))
        if host is not None:
            rows += [Check(service, "cannot reach host services", True, "r"),
                     Check(service, "cannot reach host services", host, "r")]
    return rows


def test_the_stack_without_pids_fails_them_and_gaps_swap_privileges_and_the_nat() -> None:
    """A stack without a pids limit on Docker 20.10, with docker_gwbridge's NAT (as swarm init
    makes it) and the probes that show it closed: pids FAIL; swap, no-new-privileges and the
    edge's NAT are GAPs."""
    client, _ = the_stack()
    checks = verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client), probed())
    assert not [c for c in checks if c.service == "init"]
    assert failing(checks) == {(s, "pids limit") for s in verify.NETWORKS}
    edge_nat = {(s, "network edge: no NAT out") for s in ("broker", "intake", "dashboard")}
    assert {(c.service, c.name) for c in checks if c.gap} == edge_nat | {
        (s, name) for s in verify.NETWORKS for name in ("no-new-privileges", "memory, no swap")}


def test_the_stack_with_every_setting_it_can_take_passes() -> None:
    """A pids limit, no swap, NoNewPrivs from the daemon and a gwbridge without NAT: every check PASSes."""
    client, containers = the_stack(masquerade="false", PidsLimit=128, MemorySwap=256 << 20)
    for container in containers:
        container.seen["NoNewPrivs"] = "1"
    checks = verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client))
    assert [c for c in checks if c.status != "PASS"] == []


def test_scaled_replicas_are_each_inspected_under_their_slot() -> None:
    """Two readers give rows reader.1 and reader.2, each with every inspection."""
    client, _ = the_stack(readers=2)
    checks = verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client))
    services = {c.service for c in checks}
    assert {"reader.1", "reader.2", "model.1", "model.2"} <= services and "reader" not in services
    assert sum(c.name == "read-only root" and c.service.startswith("reader") for c in checks) == 2


@pytest.mark.parametrize(("evidence", "says"), [
    ([], "'no route outside' not probed (pypi.org did not resolve?); 'cannot reach host services' not probed"),
    (probed(outside=None), "'no route outside' not probed"),
    (probed(outside=False), "'no route outside' failed"),
    (probed(host=None), "'cannot reach host services' not probed"),
    (probed(host=False), "'cannot reach host services' failed"),
    (probed(("broker", "dashboard")), "'no route outside' not probed"),
], ids=["no-probes", "outside-not-probed", "outside-failed", "host-not-probed", "host-failed", "other-services"])
def test_the_nat_is_a_fail_without_the_probes_that_show_it_closed(evidence: list[Check], says: str) -> None:
    """docker_gwbridge's NAT is a GAP only when that service's probes out and to the host ran and
    passed; else a FAIL whose reason says which evidence is missing."""
    status, reason = verify_swarm.edge_nat("intake", True, "true", evidence)
    assert status == "FAIL" and says in reason
    assert verify_swarm.edge_nat("intake", True, "true", probed())[0] == "GAP"
    assert verify_swarm.edge_nat("intake.2", True, "true", probed())[0] == "GAP"
    assert verify_swarm.edge_nat("intake", True, "false", [])[0] == "PASS"


def test_an_edge_task_not_on_gwbridge_fails_and_is_still_probed_there() -> None:
    """Edge is not internal, so a task on it missing from docker_gwbridge FAILs (NAT off or on),
    and its gateway is probed all the same."""
    client, containers = the_stack(masquerade="false")
    intake = next(c for c in containers if c.name.startswith("sdev_intake."))
    del client._networks[-1].attrs["Containers"][intake.id]
    lab = verify_swarm.SwarmLab(STACK, client)
    nat = [c for c in verify_swarm.inspect(lab, probed()) if c.name == "network edge: no NAT out"]
    assert {c.service for c in nat if c.status == "FAIL"} == {"intake"}
    assert "not on docker_gwbridge" in next(c.reason for c in nat if c.service == "intake")
    assert "172.18.0.1" in lab.gateways("intake")


def test_verify_fails_the_nat_when_the_outside_does_not_resolve(monkeypatch) -> None:
    """With pypi.org unresolved no "no route outside" probe is planned, so the NAT has no
    evidence: a FAIL and exit 1, however the other probes went."""
    client, _ = the_stack()
    monkeypatch.setattr(verify, "outside_address", lambda: None)
    monkeypatch.setattr(verify, "host_listener", lambda: contextlib.nullcontext(40000))
    checks = verify_swarm.run(STACK, verify_swarm.SwarmLab(STACK, client), connect=lambda host, port: "refused")
    nat = {c.service: c for c in checks if c.name == "network edge: no NAT out"}
    assert set(nat) == set(EDGE_SERVICES) and all(c.status == "FAIL" for c in nat.values())
    assert "'no route outside' not probed" in nat["intake"].reason
    assert not verify.passed(checks)


def test_verify_gaps_the_nat_when_the_probes_show_it_closed(monkeypatch) -> None:
    """The same run with the outside resolved and every probe blocked: the NAT is a GAP."""
    client, _ = the_stack()
    monkeypatch.setattr(verify, "outside_address", lambda: "192.0.2.80")
    monkeypatch.setattr(verify, "host_listener", lambda: contextlib.nullcontext(40000))
    checks = verify_swarm.run(STACK, verify_swarm.SwarmLab(STACK, client), connect=lambda host, port: "refused")
    nat = [c for c in checks if c.name == "network edge: no NAT out"]
    assert len(nat) == 3 and all(c.status == "GAP" for c in nat)


HOST_PORT = 40000  # the host listener's port in these runs
ROUTE = "192.0.2.2"  # this host's address on its default route, in these runs


def loopback_node(answers: dict[str, dict[tuple[str, int], str]], node_address: str = "127.0.0.1",
                  ) -> verify_swarm.SwarmLab:
    """The stack on a node advertised at a loopback address (`docker swarm init --advertise-addr
    127.0.0.1`), each service's probes answering as given; every other probe times out."""
    client, containers = the_stack()
    client.node_address = node_address
    for container in containers:
        container.answers = answers.get(container.labels[verify_swarm.SERVICE_LABEL][len(STACK) + 1:], {})
    return verify_swarm.SwarmLab(STACK, client)


def recorded_behind_the_firewall() -> dict[str, dict[tuple[str, int], str]]:
    """What each task's probe printed on a single-node swarm advertised at 127.0.0.1, after
    scripts/lab-firewall --swarm: 127.0.0.1 refused everywhere (each task's own loopback,
    where nothing listens); the host's addresses time out from edge (dropped on
    docker_gwbridge) and have no route from an internal overlay."""
    answers = {}
    for service in verify.NETWORKS:
        own = {("127.0.0.1", HOST_PORT): "refused"}
        if service in EDGE_SERVICES:
            answers[service] = {**own, ("172.18.0.1", HOST_PORT): "timeout", (ROUTE, HOST_PORT): "timeout"}
        else:
            answers[service] = {**own, (ROUTE, HOST_PORT): "unreachable:ENETUNREACH"}
    return answers


@pytest.fixture
def host_run(monkeypatch) -> None:
    """verify's run with no socket: the host listener on HOST_PORT, the outside resolved,
    this host's default-route address ROUTE."""
    monkeypatch.setattr(verify, "outside_address", lambda: "192.0.2.80")
    monkeypatch.setattr(verify, "host_listener", lambda: contextlib.nullcontext(HOST_PORT))
    monkeypatch.setattr(verify_swarm, "default_route_address", lambda: ROUTE, raising=False)


def host_rows(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.name in ("cannot reach host services", "network edge: no NAT out")]


@pytest.mark.parametrize("node_address", ["127.0.0.1", "127.0.1.1", "::1", "0.0.0.0"])
def test_a_loopback_node_address_is_never_probed_as_the_host(node_address: str, host_run: None) -> None:
    """Inside a task a loopback address is the task's own: the node's address is replaced by
    this host's default-route address, and docker_gwbridge's gateway stays for edge's tasks."""
    lab = loopback_node({}, node_address)
    assert lab.gateways("reader") == [ROUTE]
    assert lab.gateways("intake") == ["172.18.0.1", ROUTE]


def test_a_loopback_advertised_node_behind_the_firewall_passes(host_run: None) -> None:
    """The recorded probes of a 127.0.0.1-advertised node after the firewall: every service
    cannot reach the host and edge's NAT is the GAP the firewall closes; no row probed 127.0.0.1."""
    checks = verify_swarm.run(STACK, loopback_node(recorded_behind_the_firewall()), connect=only_intake)
    assert [c for c in host_rows(checks) if c.status == "FAIL"] == []
    assert {c.service for c in checks if c.name == "cannot reach host services"} == set(verify.NETWORKS)
    assert {c.service for c in checks if c.name == "network edge: no NAT out" and c.gap} == set(EDGE_SERVICES)
    assert not [c for c in checks if "127.0.0.1" in c.reason]


def test_a_host_address_that_connects_still_fails_on_a_loopback_advertised_node(host_run: None) -> None:
    """The same node without the firewall (the broker's task connects to the host's address):
    the broker cannot-reach row and its NAT FAIL, so the substituted target is evidence."""
    answers = recorded_behind_the_firewall()
    answers["broker"][(ROUTE, HOST_PORT)] = "connected"
    checks = verify_swarm.run(STACK, loopback_node(answers), connect=only_intake)
    assert {(c.service, c.name) for c in host_rows(checks) if c.status == "FAIL"} == {
        ("broker", "cannot reach host services"), ("broker", "network edge: no NAT out")}


def test_no_host_address_to_probe_is_a_fail_not_a_silent_pass(monkeypatch, host_run: None) -> None:
    """A loopback node address and no default route: each service not on docker_gwbridge has
    nothing to probe the host at, which is a FAIL that says so, not a missing row."""
    monkeypatch.setattr(verify_swarm, "default_route_address", lambda: None, raising=False)
    checks = verify_swarm.run(STACK, loopback_node(recorded_behind_the_firewall()), connect=only_intake)
    unprobed = [c for c in checks if c.name == "cannot reach host services" and c.status == "FAIL"]
    assert {c.service for c in unprobed} == set(verify.NETWORKS) - set(EDGE_SERVICES)
    assert all("no address of the host" in c.reason for c in unprobed)


def intake_lab(**answers: dict[tuple[str, int], str]) -> verify_swarm.SwarmLab:
    """The stack with the given probe answers, by service, from its containers."""
    client, containers = the_stack()
    for container in containers:
        container.answers = answers.get(container.labels[verify_swarm.SERVICE_LABEL][len(STACK) + 1:], {})
    return verify_swarm.SwarmLab(STACK, client)


BROKER_GW = "172.18.0.2"  # the broker's docker_gwbridge address in the_stack (its first container on it)
INTAKE = verify.PORTS["intake"]


def only_intake(host: str, port: int) -> str:
    """This process's view: the broker's intake listens on its gwbridge address, nothing else does."""
    return "connected" if (host, port) == (BROKER_GW, INTAKE) else "refused"


def test_the_intake_on_gwbridge_is_bound_and_nothing_else() -> None:
    """From this process the broker's gwbridge address takes the intake and no other endpoint;
    from the reader, validator and actor it has no route."""
    calls: list[tuple[str, int]] = []

    def connect(host: str, port: int) -> str:
        calls.append((host, port))
        return only_intake(host, port)

    checks = verify_swarm.intake_on_gwbridge(intake_lab(), connect)
    assert [c for c in checks if c.status != "PASS"] == []
    assert sorted(calls) == [(BROKER_GW, verify.PORTS[r]) for r in ("intake", "reader", "validator", "actor", "trace")]
    assert {(c.service, c.name) for c in checks} >= {(s, "cannot reach the broker on docker_gwbridge")
                                                      for s in ("reader", "validator", "actor")}
    assert len(checks) == 8


@pytest.mark.parametrize(("connect", "answers", "failed"), [
    (lambda host, port: "refused", {}, ("host", "reaches the broker's intake on docker_gwbridge")),
    (lambda host, port: "connected", {}, ("host", "actor endpoint not bound on docker_gwbridge")),
    (only_intake, {"reader": {(BROKER_GW, INTAKE): "connected"}},
     ("reader", "cannot reach the broker on docker_gwbridge")),
    (only_intake, {"actor": {(BROKER_GW, INTAKE): "refused"}}, ("actor", "cannot reach the broker on docker_gwbridge")),
], ids=["intake-not-bound", "other-endpoints-bound", "reader-connects", "actor-has-a-route"])
def test_each_intake_on_gwbridge_breach_fails(connect: Any, answers: dict, failed: tuple[str, str]) -> None:
    assert failed in failing(verify_swarm.intake_on_gwbridge(intake_lab(**answers), connect))


def test_a_broker_not_on_gwbridge_fails_the_intake_probes() -> None:
    """No gwbridge address for the broker: every row FAILs saying so, and nothing is connected to."""
    lab = intake_lab()
    lab.gwbridge["Containers"].pop(lab.containers["broker"].id)
    checks = verify_swarm.intake_on_gwbridge(lab, lambda host, port: pytest.fail("connected"))
    assert len(checks) == 8 and all(c.status == "FAIL" and "no address on docker_gwbridge" in c.reason
                                    for c in checks)


@pytest.mark.parametrize("outcome", [None, TimeoutError(), ConnectionRefusedError(), socket.gaierror(),
                                     OSError(errno.EHOSTUNREACH, "no route")],
                         ids=["connected", "timeout", "refused", "no-name", "unreachable"])
def test_this_processs_connect_says_what_the_probe_script_says(outcome: Exception | None, monkeypatch,
                                                                capsys) -> None:
    """connect() and verify.PROBE name each socket outcome alike (no socket opened: create_connection is faked)."""
    def create_connection(address: tuple, timeout: float) -> SimpleNamespace:
        assert timeout == verify.PROBE_TIMEOUT_S
        if outcome is not None:
            raise outcome
        return SimpleNamespace(close=lambda: None)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(sys, "argv", ["-c", "192.0.2.9", "7401", str(verify.PROBE_TIMEOUT_S)])
    exec(verify.PROBE, {})  # the probe script itself, run here with the socket faked
    assert verify_swarm.connect("192.0.2.9", 7401) == capsys.readouterr().out.strip()


@pytest.mark.parametrize(("change", "check"), [
    ({"Options": {}}, "network readers: encrypted overlay"),
    ({"Driver": "bridge"}, "network readers: encrypted overlay"),
    ({"Internal": False}, "network readers: internal"),
])
def test_each_network_weakening_fails_its_check(change: dict, check: str) -> None:
    """An unencrypted, non-overlay or non-internal readers network fails for the services on it."""
    client, _ = the_stack(masquerade="false", PidsLimit=128, MemorySwap=256 << 20)
    client._networks[NETWORK_OF["readers"]].attrs.update(change)
    checks = verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client))
    assert {c.name for c in checks if c.status == "FAIL"} == {check}
    assert {c.service for c in checks if c.status == "FAIL"} == {"broker", "reader"}


def test_a_missing_service_fails() -> None:
    client, containers = the_stack()
    client._containers = [c for c in containers if not c.name.startswith("sdev_actor.")]
    checks = verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client))
    assert ("actor", "running") in failing(checks)


@pytest.mark.parametrize(("brokers", "ok"), [(1, True), (2, False)])
def test_the_broker_runs_exactly_one_task(brokers: int, ok: bool) -> None:
    """One broker: a second task would split the pipeline's state, so any other count FAILs."""
    client, _ = the_stack()
    client._containers += [FakeContainer("broker", slot) for slot in range(2, brokers + 1)]
    checks = verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client))
    one = [c for c in checks if c.name == "one broker"]
    assert len(one) == 1 and one[0].ok is ok and one[0].reason.startswith(f"{brokers} running task")


def test_no_broker_fails_one_broker() -> None:
    client, containers = the_stack()
    client._containers = [c for c in containers if not c.name.startswith("sdev_broker.")]
    assert ("broker", "one broker") in failing(verify_swarm.inspect(verify_swarm.SwarmLab(STACK, client)))



@pytest.mark.parametrize(("argv", "says"), [
    (["verify", "--swarm"], "needs --stack NAME"),
    (["verify", "--stack", "sdev"], "--swarm --stack NAME"),
    (["verify", "--swarm", "--stack", "sdev", "--project", "lab"], "with --swarm, name the stack"),
], ids=["swarm-without-stack", "stack-without-swarm", "swarm-with-project"])
def test_verify_options_that_do_not_go_together_are_a_usage_error(argv: list[str], says: str, capsys) -> None:
    """--stack goes with --swarm and only with it; the error says so, exit 2, before any engine is asked."""
    assert lab_cli.main(argv) == EX_USAGE
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "target"), [
    (["verify", "--swarm", "--stack", "sdev"], ("swarm", "sdev")),
    (["verify", "-p", "lab"], ("compose", "lab")),
    (["verify"], ("compose", None)),
])
def test_verify_target(argv: list[str], target: tuple) -> None:
    assert lab_cli.verify_target(lab_cli.build_parser().parse_args(argv)) == target


def test_swarm_json_carries_the_status_and_a_gap_exits_0(monkeypatch, capsys) -> None:
    """A stack's JSON rows add the status (GAP); a GAP alone exits 0, a FAIL exits 1."""
    checks = [Check("reader", "x", True, "r"), Check.judged("reader", "pids limit", "GAP", "r")]
    monkeypatch.setattr(verify_swarm, "run", lambda stack: checks)
    assert lab_cli.main(["verify", "--swarm", "--stack", "sdev", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["ok"], r["status"]) for r in rows] == [(True, "PASS"), (False, "GAP")]
    checks.append(Check("actor", "y", False, "r"))
    assert lab_cli.main(["verify", "--swarm", "--stack", "sdev"]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("3 checks: 1 FAIL, 1 GAP")


def test_compose_json_rows_are_as_they_were(monkeypatch, capsys) -> None:
    """The compose path's JSON keeps its four keys."""
    monkeypatch.setattr(verify, "run", lambda project: [Check("reader", "x", True, "r")])
    assert lab_cli.main(["verify", "-p", "lab", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"service": "reader", "check": "x", "ok": True, "reason": "r"}]


def test_no_key_folder_is_no_key_and_an_unreadable_one_is_named(tmp_path: Path) -> None:
    """The model has no /keys at all: the probe reports no key file (the policy check then
    says whether that is right), not a folder it could not stat; a key file is stat'ed."""
    def keyfiles(keys_top: Path) -> dict:
        done = subprocess.run([sys.executable, "-S", "-c", verify_swarm.PRIVILEGES, str(tmp_path / "empty"),
                               str(keys_top)], capture_output=True, text=True, check=True)
        seen = verify_swarm.privileges_seen(done.stdout)
        assert seen is not None
        return seen["keyfiles"]

    (tmp_path / "empty").mkdir()
    assert keyfiles(tmp_path / "no-keys") == {}
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "reader.key_secret").write_bytes(b"")
    os.chmod(tmp_path / "keys" / "reader.key_secret", 0o400)
    assert keyfiles(tmp_path / "keys") == {str(tmp_path / "keys" / "reader.key_secret"): [0o400, os.getuid()]}
    assert verify_swarm.keys_read_only("model", {"keys": {}, "keyfiles": {}, "uid": 10001}).ok
