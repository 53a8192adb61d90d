"""airlock verify's rules, on inspect data and file trees, without a Docker engine."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ops import verify

ROOT = Path(__file__).resolve().parents[2]


def hardened(**host: object) -> dict:
    config = {"ReadonlyRootfs": True, "CapDrop": ["ALL"], "CapAdd": None, "Privileged": False,
              "SecurityOpt": ["no-new-privileges:true"], "PidsLimit": 64, "Memory": 256 << 20,
              "MemorySwap": 256 << 20, "NetworkMode": "lab_readers"}
    return {"Config": {"User": "10001:10001"}, "HostConfig": {**config, **host}, "Mounts": []}


@pytest.mark.parametrize(("change", "failing"), [
    ({}, set()),
    ({"ReadonlyRootfs": False}, {"read-only root"}),
    ({"CapDrop": []}, {"capabilities"}),
    ({"CapAdd": ["NET_RAW"]}, {"capabilities"}),
    ({"SecurityOpt": []}, {"no-new-privileges"}),
    ({"Privileged": True}, {"not privileged"}),
    ({"PidsLimit": 0}, {"pids limit"}),
    ({"MemorySwap": -1}, {"memory, no swap"}),
    ({"Memory": 0, "MemorySwap": 0}, {"memory, no swap"}),
    ({"NetworkMode": "host"}, {"network mode"}),
])
def test_each_inspection_fails_on_its_own_weakening(change: dict, failing: set) -> None:
    """Weakening one HostConfig field fails exactly the inspection about it."""
    attrs = hardened(**change)
    assert {name for name, rule in verify.INSPECTIONS.items() if not rule(attrs)[0]} == failing


@pytest.mark.parametrize("user", ["", "0", "root", "0:0"])
def test_root_users_fail(user: str) -> None:
    """An empty user (the image default) or root fails the user check."""
    attrs = hardened()
    attrs["Config"]["User"] = user
    assert not verify.INSPECTIONS["non-root user"](attrs)[0]


@pytest.mark.parametrize(("service", "mounts", "ok"), [
    ("reader", [], True),
    ("reader", [{"Type": "bind", "Source": "/home/x/airlock-data", "Destination": "/data"}], False),
    ("actor", [{"Type": "bind", "Source": "/home/x/airlock-data", "Destination": "/data"}], True),
    ("actor", [], False),
    ("broker", [{"Type": "bind", "Source": "/var/run/docker.sock", "Destination": "/data"}], False),
    ("validator", [{"Type": "tmpfs", "Source": "", "Destination": "/tmp"}], True),
    ("reader", [{"Type": "bind", "Source": "/x/airlock-keys/services/reader", "Destination": "/keys", "RW": False}],
     True),
    ("reader", [{"Type": "bind", "Source": "/x/airlock-keys/services/reader", "Destination": "/keys", "RW": True}],
     False),
    ("naive", [{"Type": "volume", "Name": "lab_naive-data", "Source": "/var/lib/docker/volumes/lab_naive-data/_data",
                "Destination": "/data", "RW": True}], True),
    ("naive", [{"Type": "bind", "Source": "/home/x/airlock-data", "Destination": "/data", "RW": True}], False),
    ("naive", [], False),
])
def test_mounts_only_the_data_folder_for_its_writers(service: str, mounts: list, ok: bool) -> None:
    """Only the broker and the actor mount the data folder, the naive agent a volume of its own
    there; nobody mounts the Docker socket."""
    attrs = hardened()
    attrs["Mounts"] = mounts
    assert verify._mounts(service, attrs).ok is ok


def run_tool_code_probe(tree: Path) -> str:
    done = subprocess.run([sys.executable, "-S", "-c", verify.NO_TOOL_CODE, str(tree)],
                          capture_output=True, text=True, check=True, cwd=tree)
    return done.stdout.strip()


def test_tool_code_probe_passes_the_reader_image_tree(tmp_path: Path) -> None:
    """A tree holding what the reader image holds (kernel, reader, tasks) is clean."""
    for name in ("airlock", "reader", "tasks"):
        shutil.copytree(ROOT / name, tmp_path / name)
    assert run_tool_code_probe(tmp_path) == "clean"


def test_tool_code_probe_finds_actor_code(tmp_path: Path) -> None:
    """The same probe flags the actor package when it is there."""
    for name in ("airlock", "reader", "actor"):
        shutil.copytree(ROOT / name, tmp_path / name)
    found = run_tool_code_probe(tmp_path)
    assert "actor" in found and "catalog.toml" in found and "calllog.py" in found and "mocks.py" in found


def test_summary_line_is_not_a_test_runner_line() -> None:
    """The table's last line cannot be mistaken for a test runner's 'N passed, N failed'."""
    table = verify.table([verify.Check("reader", "x", True, "r"), verify.Check("actor", "y", False, "r")])
    assert table.splitlines()[-1] == "2 checks: 1 FAIL"


def test_table_counts_gaps_apart_and_only_fail_fails() -> None:
    """GAP shows in the result column and the summary; it fails nothing, a FAIL does."""
    gap = verify.Check.judged("reader", "pids limit", "GAP", "r")
    passed, failed = verify.Check("reader", "x", True, "r"), verify.Check("actor", "y", False, "r")
    assert gap.status == "GAP" and not gap.ok
    assert verify.table([passed, gap]).splitlines()[2].split()[-2] == "GAP"
    assert verify.table([passed, gap]).splitlines()[-1] == (
        "2 checks: no FAIL, 1 GAP (what swarm cannot enforce; docs/swarm.md)")
    assert verify.table([passed, gap, failed]).splitlines()[-1] == (
        "3 checks: 1 FAIL, 1 GAP (what swarm cannot enforce; docs/swarm.md)")
    assert verify.passed([passed, gap]) and not verify.passed([passed, gap, failed])
    assert verify.table([passed]).splitlines()[-1] == "1 checks: all PASS"  # compose's, which has no GAP


class FakeInit:
    """The init service's exited container, as the docker SDK shows it."""

    def __init__(self, **host: object) -> None:
        config = {"ReadonlyRootfs": True, "CapDrop": ["ALL"], "CapAdd": ["CHOWN", "DAC_OVERRIDE", "FOWNER"],
                  "Privileged": False, "SecurityOpt": ["no-new-privileges:true"], "NetworkMode": "none"}
        mounts = [{"Type": "bind", "Source": "/x", "Destination": "/project", "RW": False},
                  {"Type": "bind", "Source": "/x/airlock-data", "Destination": "/data", "RW": True},
                  {"Type": "bind", "Source": "/x/airlock-keys", "Destination": "/lab-keys", "RW": True}]
        self.attrs = {"Config": {"User": "0:0"}, "HostConfig": {**config, **host}, "Mounts": mounts,
                      "State": {"Status": "exited", "ExitCode": 0}}

    def reload(self) -> None:
        pass


def test_init_as_shipped_passes() -> None:
    """The init container compose.yaml describes passes every check about it."""
    assert [c for c in verify.init_checks(FakeInit()) if not c.ok] == []


@pytest.mark.parametrize(("weaken", "failing"), [
    (lambda a: a["HostConfig"].update(CapAdd=["CHOWN", "SYS_ADMIN"]), {"only the capabilities it needs"}),
    (lambda a: a["HostConfig"].update(CapDrop=[]), {"only the capabilities it needs"}),
    (lambda a: a["HostConfig"].update(NetworkMode="bridge"), {"no network"}),
    (lambda a: a["HostConfig"].update(ReadonlyRootfs=False), {"read-only root"}),
    (lambda a: a["HostConfig"].update(Privileged=True), {"not privileged"}),
    (lambda a: a["HostConfig"].update(SecurityOpt=[]), {"no-new-privileges"}),
    (lambda a: a["Mounts"][0].update(RW=True), {"mounts"}),
    (lambda a: a["Mounts"].append({"Type": "bind", "Source": "/var/run/docker.sock",
                                   "Destination": "/var/run/docker.sock", "RW": True}), {"mounts"}),
    (lambda a: a["State"].update(Status="running"), {"finished, exit 0"}),
    (lambda a: a["State"].update(ExitCode=78), {"finished, exit 0"}),
], ids=["extra-capability", "nothing-dropped", "on-a-network", "writable-root", "privileged",
        "new-privileges", "project-writable", "docker-socket", "still-running", "failed"])
def test_each_init_weakening_fails_its_own_check(weaken, failing: set) -> None:
    """The root init container is held to its three capabilities, no network, read-only root and its three mounts."""
    init = FakeInit()
    weaken(init.attrs)
    assert {c.name for c in verify.init_checks(init) if not c.ok} == failing


def test_a_missing_init_is_a_failure() -> None:
    """A project without the init service fails one check that says so."""
    (check,) = verify.init_checks(None)
    assert not check.ok and "no init container" in check.reason


@pytest.mark.parametrize(("options", "ok"), [
    ({"com.docker.network.bridge.name": "al-edge"}, True),
    ({"com.docker.network.bridge.name": "al-3f9c2-valid"}, True),
    ({"com.docker.network.bridge.name": "lab-edge"}, False),
    ({}, False),
])
def test_bridge_names_the_firewall_covers(options: dict, ok: bool) -> None:
    """A lab bridge not named al-* escapes scripts/lab-firewall: that network fails the check."""
    assert verify._bridge({"Options": options})[0] is ok


def test_a_model_probe_that_did_not_run_fails() -> None:
    assert not verify.model_closed("").ok
    assert not verify.model_closed("Traceback (most recent call last):\n  ...\nOSError: boom\n").ok
    assert not verify.model_closed("GET /tools 403\nGET /tools 403\nGET /slots ConnectionRefusedError\n"
                                   "POST /props 403\n").ok


class FakeContainer:
    def __init__(self, data: dict | None = None) -> None:
        self.attrs = {"Mounts": [{"Destination": "/data", **data}] if data else []}

    def exec_run(self, command: list[str]) -> SimpleNamespace:
        return SimpleNamespace(output=b"", exit_code=0)  # what a container holding no key prints


class FakeLab(verify.RunningLab):
    """Containers by service and each one's address per network, as `docker inspect` gives them."""

    def __init__(self, addresses: dict[str, dict[str, str]], data: dict[str, dict] | None = None) -> None:
        super().__init__(None, {s: FakeContainer((data or {}).get(s)) for s in addresses}, {}, None)
        self.addresses = addresses

    def ip(self, service: str, network: str) -> str | None:
        return self.addresses.get(service, {}).get(network)


COMPOSE_ADDRESSES = {
    "broker": {"edge": "10.0.0.2", "readers": "10.0.0.18", "validators": "10.0.0.50", "actors": "10.0.0.66"},
    "actor": {"actors": "10.0.0.67"}, "model": {"model": "10.0.0.34"},
    "dashboard": {"edge": "10.0.0.3", "naive": "10.0.0.82"},
    "naive": {"naive": "10.0.0.94", "naivemodel": "10.0.0.98"}, "naive-model": {"naivemodel": "10.0.0.99"},
}


def planned_naive_probes(lab: verify.RunningLab) -> set[tuple]:
    planned: set[tuple] = set()
    verify.naive_probes(lab, lambda service, name, host, port, want: planned.add((service, host, port, want)))
    return planned


def test_the_naive_agent_is_probed_towards_everything_of_airlock_and_its_own_model() -> None:
    """Every broker endpoint on its own network, the actor, airlock's model and the page's edge
    address must be unroutable from the naive agent, the page's naive address closed; its own
    model connects, and the page reaches it; its model gets no route to the page."""
    planned = planned_naive_probes(FakeLab(COMPOSE_ADDRESSES))
    broker = COMPOSE_ADDRESSES["broker"]
    assert {("naive", broker[verify.ENDPOINT_NETWORKS[e]], verify.PORTS[e], "no route")
            for e in ("intake", "trace", "reader", "validator", "actor")} <= planned
    assert {("naive", "10.0.0.99", 8080, "connected"), ("dashboard", "10.0.0.94", 8090, "connected"),
            ("naive", "10.0.0.67", 7404, "no route"), ("naive", "10.0.0.34", 8080, "no route"),
            ("naive", "10.0.0.82", 8088, "no connection"), ("naive", "10.0.0.3", 8088, "no route"),
            ("naive-model", "10.0.0.98", 8090, "no connection"), ("naive-model", "10.0.0.82", 8088, "no route")} \
        <= planned
    assert {service for service, *_ in planned} == {"naive", "dashboard", "naive-model"}


def test_no_naive_rows_where_no_naive_agent_runs() -> None:
    """Swarm's stack runs no naive agent: its page plans no probe towards one."""
    addresses = {k: v for k, v in COMPOSE_ADDRESSES.items() if not k.startswith("naive")}
    assert planned_naive_probes(FakeLab(addresses)) == set()


def test_every_service_is_probed_towards_the_host_and_the_outside() -> None:
    """The naive agent and its model get the host and outside rows every service gets."""
    class Quiet(FakeLab):
        def probe(self, service: str, host: str, port: int) -> str:
            return "unreachable:ENETUNREACH"

        def gateways(self, service: str) -> list[str]:
            return ["10.0.0.1"]

    checks = verify.probes(Quiet({s: COMPOSE_ADDRESSES[s] for s in ("naive", "naive-model")}), "192.0.2.1", 9)
    names = {(c.service, c.name) for c in checks}
    for service in ("naive", "naive-model"):
        assert {(service, "no route outside"), (service, "cannot reach host services")} <= names


@pytest.mark.parametrize(("naive", "actor", "ok"), [
    ({"Type": "volume", "Name": "lab_naive-data"}, {"Type": "bind", "Source": "/x/airlock-data"}, True),
    ({"Type": "volume", "Name": "lab_data"}, {"Type": "volume", "Name": "lab_data"}, False),
    (None, {"Type": "bind", "Source": "/x/airlock-data"}, False),
])
def test_the_naive_call_log_is_its_own(naive, actor, ok: bool) -> None:
    """The naive agent's /data is mounted by no other container: the actor's call log is not its own."""
    lab = FakeLab({"naive": {}, "actor": {}}, {"naive": naive, "actor": actor})
    check = verify.own_data(lab, "naive")
    assert check.ok is ok, check.reason


def test_verify_holds_each_compose_service_to_the_networks_compose_gives_it() -> None:
    """COMPOSE_NETWORKS is compose.yaml's networks per running service; NETWORKS, the pipeline's
    (swarm's and Kubernetes'), is the same less the naive agent, its model and the page's way to it."""
    from ops import swarm

    services = swarm.read_compose({})["services"]
    assert {name: set(services[name]["networks"]) for name in verify.COMPOSE_NETWORKS} == verify.COMPOSE_NETWORKS
    assert set(verify.COMPOSE_NETWORKS) - set(verify.NETWORKS) == {"naive", "naive-model"}
    assert verify.COMPOSE_NETWORKS["dashboard"] - verify.NETWORKS["dashboard"] == {"naive"}
