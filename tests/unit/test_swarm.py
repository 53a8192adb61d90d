"""The swarm stack generated from compose.yaml (ops/swarm.py) and the docker command lines
of `airlock swarm up/down` (ops/swarm_deploy.py). No docker runs: the stack is read as data,
the commands go to a recording runner."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from airlock import keys, settings as settings_module
from ops import swarm, swarm_deploy
from ops.verify import NETWORKS

# Keys `docker stack deploy` ignores (build, restart, depends_on, security_opt), silently
# drops (tmpfs, and ipv4_address under a network) or rejects (mem_limit, memswap_limit,
# pids_limit) in a service, and compose-only ones with no swarm meaning.
REFUSED_BY_STACK_DEPLOY = {"build", "restart", "depends_on", "security_opt", "tmpfs", "mem_limit", "memswap_limit",
                           "pids_limit", "profiles", "network_mode", "container_name", "cap_add"}


@pytest.fixture(scope="module")
def key_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("swarm") / "keys"
    keys.generate(folder)
    keys.make_people(folder, ["dana"])  # an approver: the broker's folder holds allow/people/dana.key
    return folder


@pytest.fixture(scope="module")
def stack(key_folder: Path) -> dict[str, Any]:
    rendered = swarm.render("class-07", key_folder, readers=3, env={})
    return yaml.safe_load(yaml.dump(rendered, Dumper=swarm._NoAliases))  # as docker reads the file


def test_no_service_keeps_a_key_stack_deploy_ignores_or_rejects(stack: dict[str, Any]) -> None:
    """What swarm would drop in silence is moved or dropped here, so nothing is believed kept."""
    assert stack["version"] == "3.9"
    for name, spec in stack["services"].items():
        assert not REFUSED_BY_STACK_DEPLOY & set(spec), name
        assert not any("ipv4_address" in str(attached) for attached in spec["networks"]), name
    assert REFUSED_BY_STACK_DEPLOY <= swarm.UNSUPPORTED


def compose_pids(name: str) -> int:
    """compose.yaml's own pids_limit for the service: the stack must keep compose's number."""
    return int(swarm.read_compose({})["services"][name]["pids_limit"])


def test_every_service_keeps_the_hardening(stack: dict[str, Any]) -> None:
    """Read-only root, uid 10001, every capability dropped, /tmp a tmpfs, memory and pids under deploy."""
    assert set(stack["services"]) == set(NETWORKS)
    for name, spec in stack["services"].items():
        assert spec["read_only"] is True and spec["user"] == "10001:10001" and spec["cap_drop"] == ["ALL"], name
        assert {"type": "tmpfs", "target": "/tmp", "tmpfs": {"size": 16 * 2**20}} in spec["volumes"], name
        assert spec["deploy"]["resources"]["limits"]["memory"] == ("1g" if name == "model" else "256m"), name
        assert spec["deploy"]["resources"]["limits"]["pids"] == compose_pids(name), name


def test_only_broker_and_actor_keep_data_on_the_one_data_volume(stack: dict[str, Any]) -> None:
    """No bind mount of a host path anywhere; the broker's journal and the actor's ledger on
    one named volume, as compose's one ./airlock-data (the host reads trace and calls there)."""
    assert stack["volumes"] == {"data": {}}
    for name, spec in stack["services"].items():
        others = [v for v in spec["volumes"] if v["type"] != "tmpfs"]
        data = {"type": "volume", "source": "data", "target": "/data"}
        expected = [data] if name in {"broker", "actor"} else []
        assert others == expected, name


def test_networks_are_encrypted_overlays_internal_but_edge_on_distinct_pinned_subnets(stack: dict[str, Any]) -> None:
    """Each trust boundary an encrypted overlay; only edge (host-mode ports) leaves the overlay."""
    networks = stack["networks"]
    assert set(networks) == set().union(*NETWORKS.values())
    for name, spec in networks.items():
        assert spec["driver"] == "overlay" and spec["driver_opts"] == {"encrypted": "true"}, name
        assert spec["internal"] is (name != "edge"), name
    subnets = [ipaddress.IPv4Network(spec["ipam"]["config"][0]["subnet"]) for spec in networks.values()]
    assert not any(a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[i + 1:])


def test_each_service_is_on_exactly_the_networks_of_the_trust_table(stack: dict[str, Any]) -> None:
    """The same table `airlock verify` holds the compose lab to (ops/verify.py NETWORKS)."""
    assert {name: set(spec["networks"]) for name, spec in stack["services"].items()} == NETWORKS


def test_the_stack_leaves_out_compose_s_naive_agent(stack: dict[str, Any]) -> None:
    """No naive agent, model or network in the stack, and the page is told nothing of one:
    it listens on every address of its task (the image's default) and its naive pane is off."""
    assert not {name for name in stack["services"] if name.startswith("naive")}
    assert not {name for name in stack["networks"] if name.startswith("naive")}
    environment = stack["services"]["dashboard"]["environment"]
    assert not {"AIRLOCK_DASHBOARD_HOST", "AIRLOCK_NAIVE_URL"} & set(environment), environment
    assert environment["AIRLOCK_TASK"] == "/app/tasks/order_status.toml"


def test_each_service_gets_exactly_its_key_folder_as_secrets(stack: dict[str, Any], key_folder: Path) -> None:
    """One secret per file `airlock keys` gives the service's folder, at the same path under
    /keys, the services' user's, 0400; the model none; every secret declared external."""
    for name, spec in stack["services"].items():
        folder = key_folder / "services" / name
        expected = {f"/keys/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*") if p.is_file()} \
            if name != "model" else set()
        secrets = spec.get("secrets", [])
        assert {s["target"] for s in secrets} == expected, name
        assert all((s["uid"], s["gid"], s["mode"]) == ("10001", "10001", 0o400) for s in secrets), name
        assert all(stack["secrets"][s["source"]] == {"external": True} for s in secrets), name
    assert "/keys/allow/people/dana.key" in {s["target"] for s in stack["services"]["broker"]["secrets"]}
    assert not any(s["target"].endswith("broker.key_secret")
                   for name, spec in stack["services"].items() if name != "broker" for s in spec.get("secrets", []))


def test_new_keys_get_new_secret_names(tmp_path: Path) -> None:
    """A secret cannot change: a key file's secret is named by its content, so new keys
    deploy as new secrets instead of meeting the old ones."""
    same = swarm.secret_name("s", "reader", Path("reader.key_secret"), b"one")
    assert same == swarm.secret_name("s", "reader", Path("reader.key_secret"), b"one")
    assert same != swarm.secret_name("s", "reader", Path("reader.key_secret"), b"two")
    assert len(swarm.secret_name("a" * 20, "dashboard", Path("allow/people") / ("p" * 64 + ".key"), b"")) <= 64


def test_the_broker_binds_each_endpoint_on_its_roles_subnet(stack: dict[str, Any]) -> None:
    """compose's static address per network becomes `subnet:` of that network's pinned subnet,
    and the broker's settings read it (the trace and intake endpoints on edge). The intake,
    whose port is published, also binds where host-mode ports arrive (default-route)."""
    subnet = {name: spec["ipam"]["config"][0]["subnet"] for name, spec in stack["networks"].items()}
    environment = stack["services"]["broker"]["environment"]
    loaded = settings_module.load(environment)
    assert loaded.bind_hosts == {"intake": f"subnet:{subnet['edge']},default-route",
                                 "trace": f"subnet:{subnet['edge']}",
                                 "reader": f"subnet:{subnet['readers']}", "validator": f"subnet:{subnet['validators']}",
                                 "actor": f"subnet:{subnet['actors']}"}


def test_readers_and_models_scale_and_the_rest_stay_single(stack: dict[str, Any]) -> None:
    """--readers N: N readers and N models; one broker (one journal), one of each other."""
    assert {name: spec["deploy"]["replicas"] for name, spec in stack["services"].items()} == {
        "broker": 1, "reader": 3, "model": 3, "validator": 1, "actor": 1, "intake": 1, "dashboard": 1}


def test_only_the_intake_endpoint_smtp_and_page_are_published_in_host_mode(key_folder: Path) -> None:
    """Host mode (the node's port, no routing mesh), on compose's ports; AIRLOCK_INTAKE_PORT
    moves the broker's intake so the host CLI's `airlock inject` reaches it."""
    stack = swarm.render("airlock", key_folder, env={"AIRLOCK_INTAKE_PORT": "7501"})
    ports = {name: spec["ports"] for name, spec in stack["services"].items() if "ports" in spec}
    assert ports == {
        "broker": [{"target": 7401, "published": 7501, "protocol": "tcp", "mode": "host"}],
        "intake": [{"target": 2525, "published": 2525, "protocol": "tcp", "mode": "host"}],
        "dashboard": [{"target": 8088, "published": 8088, "protocol": "tcp", "mode": "host"}]}


@pytest.mark.parametrize("stack_name", ["Airlock", "1lab", "a" * 21, "a_b"])
def test_a_bad_stack_name_is_refused(key_folder: Path, stack_name: str) -> None:
    """The name prefixes secrets, volumes and networks: short, lower case, a letter first."""
    with pytest.raises(swarm.UsageError, match="stack name"):
        swarm.render(stack_name, key_folder, env={})


IMAGES = tuple(f"airlock/{name}:latest" for name in swarm.SERVICES)  # compose's names with no AIRLOCK_TAG


class Recorder:
    """A docker runner that runs nothing: it keeps each command line and answers `secret ls`."""

    def __init__(self, held: Sequence[str] = (), images: Sequence[str] | None = None) -> None:
        """`images`: what the engine holds; default every image the stack names as this
        environment tags them."""
        services = swarm.read_compose(os.environ)["services"]
        self.held = held
        self.images = [services[name]["image"] for name in swarm.SERVICES] if images is None else images
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if argv[:3] == ["docker", "image", "ls"]:
            return "\n".join(self.images) + "\n"
        return "\n".join(self.held) + "\n" if argv[:3] == ["docker", "secret", "ls"] else ""


def test_up_builds_only_the_images_the_engine_lacks_as_compose_does(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An image missing (the model) is built from this checkout with compose's target and
    base; the ones held are not; nothing is pulled."""
    for name in ("AIRLOCK_BASE", "AIRLOCK_TAG"):  # .ci/run sets AIRLOCK_BASE: the defaults here
        monkeypatch.delenv(name, raising=False)
    recorder = Recorder(images=[image for image in IMAGES if "model" not in image])
    swarm_deploy.up("lab", tmp_path / "keys", readers=1, run=recorder)
    builds = [call for call in recorder.calls if call[:2] == ["docker", "build"]]
    assert builds == [["docker", "build", "--target", "model", "--build-arg", "AIRLOCK_BASE=python:3.12-slim",
                       "-t", "airlock/model:latest", str(swarm.COMPOSE.parent)]]
    base = swarm_deploy.build_missing(Recorder(images=[]), env={"AIRLOCK_BASE": "airlock/base:bookworm",
                                                               "AIRLOCK_TAG": "t1"})
    assert base == [f"airlock/{name}:t1" for name in swarm.SERVICES]
    every = Recorder()  # holds them all; --build builds them all the same, and asks nothing
    assert swarm_deploy.build_missing(every, rebuild=True) == every.images
    assert [call[:2] for call in every.calls] == [["docker", "build"]] * len(swarm.SERVICES)


def test_up_makes_keys_creates_missing_secrets_and_deploys_without_pulling(tmp_path: Path) -> None:
    """Keys made in DIR, one `docker secret create` per key file swarm lacks (labelled with
    the stack), then `docker stack deploy --resolve-image never` of the file written."""
    folder = tmp_path / "keys"
    first = Recorder()
    made, created, out = swarm_deploy.up("lab", folder, readers=2, run=first)
    assert made == "made" and out == tmp_path / "lab.stack.yaml" and out.is_file()
    creates = [call for call in first.calls if call[:3] == ["docker", "secret", "create"]]
    assert len(creates) == len(created) == sum(len(s) for s in swarm.key_secrets("lab", folder).values())
    assert all(call[3:5] == ["--label", "airlock.stack=lab"] and Path(call[-1]).is_file() for call in creates)
    assert first.calls[-1] == ["docker", "stack", "deploy", "--resolve-image", "never", "-c", str(out), "lab"]
    again = Recorder(held=created)
    assert swarm_deploy.up("lab", folder, readers=2, run=again)[:2] == ("kept", [])
    assert [call[:3] for call in again.calls] == [["docker", "image", "ls"], ["docker", "secret", "ls"],
                                                  ["docker", "stack", "deploy"]]


def test_down_removes_the_stack_only() -> None:
    """`docker stack rm NAME`, nothing else: the secrets stay for the next up."""
    recorder = Recorder()
    swarm_deploy.down("lab", run=recorder)
    assert recorder.calls == [["docker", "stack", "rm", "lab"]]


@pytest.mark.parametrize("octets", ["010.231", "10.256", "127.0", "0.0", "224.0", "8.8", "10", "10.２31", "x.y"])
def test_subnets_that_are_not_two_octets_of_a_private_range_are_refused(key_folder: Path, octets: str) -> None:
    """A usage error naming the option, never a traceback or a public range."""
    with pytest.raises(swarm.UsageError, match="--subnets"):
        swarm.render("lab", key_folder, env={}, first_octets=octets)


def test_subnets_move_every_network(key_folder: Path) -> None:
    stack = swarm.render("lab", key_folder, env={}, first_octets="172.20")
    assert {spec["ipam"]["config"][0]["subnet"] for spec in stack["networks"].values()} == {
        f"172.20.{n}.0/24" for n in range(len(swarm.NETWORK_ORDER))}
