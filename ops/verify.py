"""`airlock verify`: prove the running lab is isolated, by inspection and by connecting.

Two kinds of evidence, per service of the compose project:
- what Docker says (`docker inspect`): user, read-only root, capabilities, no-new-privileges,
  privileged, pids and memory limits, swap, mounts, network mode, networks and `Internal`;
- what actually happens: connections opened from inside the containers. An `internal`
  network still lets a container reach the host, so reachability is tested, not inferred.

A probe's result is what the socket said: `connected`, `refused` (a route exists, nothing
listens), or blocked (`unreachable`, `timeout`, `no-name`). "Cannot reach a host" passes
only when blocked; "cannot open an endpoint" passes when anything but connected.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from airlock import keys, settings as settings_module
from airlock.errors import UsageError

# The lab's policy, as data. Change compose.yaml and this together.
NETWORKS = {
    "broker": {"edge", "readers", "validators", "actors"},
    "reader": {"readers", "model"},
    "validator": {"validators"},
    "actor": {"actors"},
    "model": {"model"},
    "intake": {"edge"},
    "dashboard": {"edge"},
}
DATA_WRITERS = {"broker", "actor"}  # only these mount the data folder, at /data
# compose only: the demonstration's naive agent beside the pipeline, the page feeding it on a
# network of their own and its model on another; swarm and Kubernetes run the pipeline alone.
NAIVE_NETWORKS = {"naive": {"naive", "naivemodel"}, "naive-model": {"naivemodel"}}
COMPOSE_NETWORKS = {**NETWORKS, "dashboard": NETWORKS["dashboard"] | {"naive"}, **NAIVE_NETWORKS}
# compose.yaml's settings that exist for the naive agent: where the page finds it, and the
# page's one listening address (its edge one, so the naive network finds nothing there).
COMPOSE_ONLY_SETTINGS = {"dashboard": ("AIRLOCK_DASHBOARD_HOST", "AIRLOCK_NAIVE_URL")}
INIT = "init"  # the one-shot service that makes the keys; root, so checked apart (lab_init.py)
INIT_CAPABILITIES = {"CHOWN", "DAC_OVERRIDE", "FOWNER"}  # what handing folders to two users takes
INIT_MOUNTS = {"/project": False, "/data": True, "/lab-keys": True}  # target -> writable
BRIDGE_PREFIX = "al-"  # scripts/lab-firewall closes the holes on bridges named al-*
DATA_MOUNT = "/data"
# Who mounts a named volume of its own at DATA_MOUNT instead of the data folder: the naive
# agent's call log, never the actor's.
OWN_VOLUME = {"naive"}
KEYS_MOUNT = "/keys"  # each service's own key folder, read-only
# The secret keys each container may hold: what `airlock keys` gives its folder (the model: none).
OWN_SECRETS = {service: set(roles) for service, roles in keys.SERVICE_KEYS.items() if service != "inject"} \
    | {"model": set(), "naive": set()}
PORTS = {**settings_module.DEFAULT_PORTS, "smtp": 2525, "model": 8080, "dashboard": 8088,
         "naive": 8090}  # the lab's: compose.yaml
OUTSIDE_HOST = "pypi.org"  # a registry this machine may reach, so probing it is harmless
PROBE_TIMEOUT_S = 2.0
# Why a probe has no target, where the generic reason (a service not running) does not say it.
UNKNOWN_TARGET = {
    "cannot reach host services": "no address of the host to probe from here (a loopback node address "
                                  "and no default route?): nothing shows the host closed",
}
HINTS = {
    "cannot reach host services": "Docker allows this even on internal networks: run scripts/lab-firewall",
    "no route outside": "run scripts/lab-firewall",
}

PROBE = r"""
import errno, socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    socket.create_connection((host, port), timeout=timeout).close()
    print("connected")
except socket.timeout:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
except socket.gaierror:
    print("no-name")
except OSError as exc:
    print("unreachable:" + errno.errorcode.get(exc.errno or 0, str(exc.errno)))
"""

SECRETS_HELD = r"""
import pathlib
print(" ".join(sorted(p.name for p in pathlib.Path("/keys").glob("**/*.key_secret"))))
"""

# What the model server answers the reader on the endpoints that would give it more than a
# completion: llama-server's built-in tools (file and shell tools when enabled), its slots
# monitor (another email's prompt) and changing its properties. Run in the reader's container.
MODEL_CLOSED = r"""
import sys, urllib.error, urllib.request
base = sys.argv[1]
for method, path in (("GET", "/tools"), ("POST", "/tools"), ("GET", "/slots"), ("POST", "/props")):
    request = urllib.request.Request(base + path, data=b"{}" if method == "POST" else None, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        code = urllib.request.urlopen(request, timeout=5).status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except OSError as exc:
        code = type(exc).__name__
    print(f"{method} {path} {code}")
"""
CLOSED = ("403", "404", "501")  # what a closed endpoint answers (llama-server: 403 or 501)

NO_TOOL_CODE = r"""
import importlib.util, pathlib, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else "/app"
sys.path.insert(0, root)
others = [m for m in ("actor", "validator", "broker") if importlib.util.find_spec(m)]
files = [str(p) for p in pathlib.Path(root).rglob("*")
         if p.name in ("catalog.toml", "calllog.py", "mocks.py", "tools.py")]
defines = re.compile(r"^class (CallLog|MockTools|Actor)\b", re.M)  # the actor's tool-running classes
code = [str(p) for p in pathlib.Path(root).rglob("*.py") if defines.search(p.read_text(errors="ignore"))]
print(" ".join(others + files + code) or "clean")
"""


Status = Literal["PASS", "GAP", "FAIL"]
# What a GAP is, in the summary line: only the swarm path (ops/verify_swarm.py) gives one.
GAP_MEANS = "what swarm cannot enforce; docs/swarm.md"


@dataclass(frozen=True)
class Check:
    """One piece of evidence. A GAP is neither proof nor failure: a protection the platform
    cannot give, compensated by another that was checked; it fails nothing (exit 0)."""

    service: str
    name: str
    ok: bool
    reason: str
    gap: bool = False

    @classmethod
    def judged(cls, service: str, name: str, status: Status, reason: str) -> Check:
        return cls(service, name, status == "PASS", reason, gap=status == "GAP")

    @property
    def status(self) -> Status:
        return "PASS" if self.ok else "GAP" if self.gap else "FAIL"


def _user(c: dict) -> tuple[bool, str]:
    user = c["Config"].get("User") or ""
    return user.split(":")[0] not in ("", "0", "root"), f"User={user or '(image default: root)'}"


def _read_only(c: dict) -> tuple[bool, str]:
    value = c["HostConfig"].get("ReadonlyRootfs")
    return bool(value), f"ReadonlyRootfs={value}"


def _capabilities(c: dict) -> tuple[bool, str]:
    dropped = [x.upper() for x in c["HostConfig"].get("CapDrop") or []]
    added = c["HostConfig"].get("CapAdd") or []
    return "ALL" in dropped and not added, f"CapDrop={dropped} CapAdd={added}"


def _no_new_privileges(c: dict) -> tuple[bool, str]:
    opts = c["HostConfig"].get("SecurityOpt") or []
    ok = any(o in ("no-new-privileges", "no-new-privileges:true", "no-new-privileges=true") for o in opts)
    return ok, f"SecurityOpt={opts}"


def _not_privileged(c: dict) -> tuple[bool, str]:
    value = c["HostConfig"].get("Privileged")
    return not value, f"Privileged={value}"


def _pids_limit(c: dict) -> tuple[bool, str]:
    value = c["HostConfig"].get("PidsLimit")
    return bool(value and value > 0), f"PidsLimit={value}"


def _memory(c: dict) -> tuple[bool, str]:
    memory, swap = c["HostConfig"].get("Memory") or 0, c["HostConfig"].get("MemorySwap")
    return memory > 0 and swap == memory, f"Memory={memory} MemorySwap={swap} (equal: no swap)"


def _network_mode(c: dict) -> tuple[bool, str]:
    mode = c["HostConfig"].get("NetworkMode") or ""
    return mode != "host" and not mode.startswith("container:"), f"NetworkMode={mode}"


INSPECTIONS: dict[str, Callable[[dict], tuple[bool, str]]] = {
    "non-root user": _user, "read-only root": _read_only, "capabilities": _capabilities,
    "no-new-privileges": _no_new_privileges, "not privileged": _not_privileged,
    "pids limit": _pids_limit, "memory, no swap": _memory, "network mode": _network_mode,
}


def docker_client() -> Any:
    """The local engine through the docker SDK, or a UsageError saying what is missing."""
    try:
        import docker
    except ImportError:
        raise UsageError("airlock verify needs the docker SDK: pip install 'airlock[lab]'") from None
    client = None
    try:
        client = docker.from_env(version="auto")
        client.ping()
    except Exception as exc:  # noqa: BLE001  the SDK raises its own and requests' errors: no engine
        if client is not None:
            client.close()
        raise UsageError(f"no Docker engine answers: {exc}") from None
    return client


class RunningLab:
    """What the checks read of a running lab, however it was found: one container per
    service, the lab's networks by their logical names (compose.yaml's), and the init
    service's container (None where there is none)."""

    def __init__(self, client: Any, containers: dict[str, Any], networks: dict[str, dict], init: Any) -> None:
        self.client, self.containers, self.networks, self.init = client, containers, networks, init

    def logical_networks(self, container: Any) -> dict[str, dict]:
        by_full = {attrs["Name"]: name for name, attrs in self.networks.items()}
        return {by_full.get(full, full): settings
                for full, settings in container.attrs["NetworkSettings"]["Networks"].items()}

    def ip(self, service: str, network: str) -> str | None:
        container = self.containers.get(service)
        if container is None:
            return None
        return self.logical_networks(container).get(network, {}).get("IPAddress") or None

    def probe(self, service: str, host: str, port: int) -> str:
        result = self.containers[service].exec_run(["python3", "-c", PROBE, host, str(port), str(PROBE_TIMEOUT_S)])
        return result.output.decode(errors="replace").strip() or f"exit {result.exit_code}"

    def gateways(self, service: str) -> list[str]:
        found = []
        for name in self.logical_networks(self.containers[service]):
            for config in (self.networks.get(name, {}).get("IPAM") or {}).get("Config") or []:
                gateway = config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
                found.append(gateway)
        return found


class Lab(RunningLab):
    """The running compose project, read through the docker SDK."""

    def __init__(self, project: str, client: Any = None) -> None:
        client = client if client is not None else docker_client()
        self.project = project
        label = f"com.docker.compose.project={project}"
        containers: dict[str, Any] = {}
        init: Any = None  # the init service's container, which has exited by now
        for container in client.containers.list(all=True, filters={"label": label}):
            labels = container.labels
            if labels.get("com.docker.compose.oneoff") == "True":
                continue  # `docker compose run` tools are not part of the stack
            service = labels.get("com.docker.compose.service", "")
            if service == INIT:
                init = container
            elif container.status in ("running", "restarting"):  # what a plain list() gave
                containers.setdefault(service, container)
        networks = {n.attrs["Labels"].get("com.docker.compose.network", n.name): n.attrs
                    for n in client.networks.list(filters={"label": label})}
        super().__init__(client, containers, networks, init)


def _bridge(network: dict) -> tuple[bool, str]:
    bridge = (network.get("Options") or {}).get("com.docker.network.bridge.name", "")
    return (bridge.startswith(BRIDGE_PREFIX),
            f"bridge {bridge or '(docker-chosen name)'}; the firewall covers {BRIDGE_PREFIX}*")


def init_checks(container: Any) -> list[Check]:
    """The init service runs as root, so it is held to what it needs: three capabilities,
    no network, a read-only root, only the project (read-only), data and key folders; and it
    has finished, with exit 0, before anything else started."""
    if container is None:
        return [Check(INIT, "ran", False, "no init container in this project (compose.yaml without it?)")]
    container.reload()
    attrs, host = container.attrs, container.attrs["HostConfig"]
    state = attrs.get("State") or {}
    added = {c.upper().removeprefix("CAP_") for c in host.get("CapAdd") or []}
    dropped = [c.upper() for c in host.get("CapDrop") or []]
    mounts = {m.get("Destination"): m for m in attrs.get("Mounts") or []}
    no_new, no_new_reason = _no_new_privileges(attrs)
    wrong = sorted(t for t, m in mounts.items() if t not in INIT_MOUNTS or bool(m.get("RW")) != INIT_MOUNTS[t])
    return [
        Check(INIT, "finished, exit 0", state.get("Status") == "exited" and state.get("ExitCode") == 0,
              f"Status={state.get('Status')} ExitCode={state.get('ExitCode')}"),
        Check(INIT, "only the capabilities it needs", "ALL" in dropped and added <= INIT_CAPABILITIES,
              f"CapDrop={dropped} CapAdd={sorted(added)}; allowed {sorted(INIT_CAPABILITIES)}"),
        Check(INIT, "no network", host.get("NetworkMode") == "none", f"NetworkMode={host.get('NetworkMode')}"),
        Check(INIT, "read-only root", bool(host.get("ReadonlyRootfs")), f"ReadonlyRootfs={host.get('ReadonlyRootfs')}"),
        Check(INIT, "no-new-privileges", no_new, no_new_reason),
        Check(INIT, "not privileged", not host.get("Privileged"), f"Privileged={host.get('Privileged')}"),
        Check(INIT, "mounts", not wrong and set(mounts) == set(INIT_MOUNTS),
              "; ".join(f"{t} {'rw' if mounts[t].get('RW') else 'ro'}" for t in wrong) or
              "the project read-only, the data and key folders"),
    ]


def inspect(lab: Lab) -> list[Check]:
    checks = init_checks(lab.init)
    for service, expected in COMPOSE_NETWORKS.items():
        container = lab.containers.get(service)
        if container is None:
            checks.append(Check(service, "running", False, "no running container for this service"))
            continue
        container.reload()
        attrs = container.attrs
        for name, rule in INSPECTIONS.items():
            ok, reason = rule(attrs)
            checks.append(Check(service, name, ok, reason))
        checks.append(_mounts(service, attrs))
        networks = set(lab.logical_networks(container))
        checks.append(Check(service, "networks", networks == expected,
                            f"on {sorted(networks)}; policy {sorted(expected)}"))
        for name in sorted(networks):
            internal = bool(lab.networks.get(name, {}).get("Internal"))
            if name == "edge":
                masquerade = (lab.networks.get(name, {}).get("Options") or {}).get(
                    "com.docker.network.bridge.enable_ip_masquerade")
                checks.append(Check(service, f"network {name}: no NAT out", masquerade == "false",
                                    f"enable_ip_masquerade={masquerade} (published ports need a non-internal network)"))
            else:
                checks.append(Check(service, f"network {name}: internal", internal, f"Internal={internal}"))
            checks.append(Check(service, f"network {name}: firewall covers it", *_bridge(lab.networks.get(name, {}))))
    checks += [own_data(lab, service) for service in sorted(OWN_VOLUME) if service in lab.containers]
    return checks


def _data_source(container: Any) -> str | None:
    return next((m.get("Name") or m.get("Source") for m in container.attrs.get("Mounts") or []
                 if m.get("Destination") == DATA_MOUNT), None)


def own_data(lab: RunningLab, service: str) -> Check:
    """A service of OWN_VOLUME writes its call log where no other container of the lab does:
    its /data is a named volume that no other running container mounts."""
    what = "its own call log, not the actor's"
    mine = _data_source(lab.containers[service])
    if mine is None:
        return Check(service, what, False, f"nothing at {DATA_MOUNT}")
    sharing = sorted(other for other, container in lab.containers.items()
                     if other != service and _data_source(container) == mine)
    shared = f", mounted by {', '.join(sharing)} too" if sharing else ", no other container's"
    return Check(service, what, not sharing, f"{DATA_MOUNT} is volume {mine}{shared}")


def _mounts(service: str, attrs: dict) -> Check:
    problems = []
    for mount in attrs.get("Mounts") or []:
        source, target, kind = mount.get("Source", ""), mount.get("Destination", ""), mount.get("Type")
        if "docker.sock" in source or "docker.sock" in target:
            problems.append(f"Docker socket at {target}")
        elif target == KEYS_MOUNT and kind == "bind":
            if mount.get("RW"):
                problems.append(f"{KEYS_MOUNT} is writable")
        elif service in OWN_VOLUME and target == DATA_MOUNT:
            if kind != "volume":
                problems.append(f"{kind} {source} -> {target}: a named volume of its own, not a host folder")
        elif kind in ("bind", "volume") and not (service in DATA_WRITERS and target == DATA_MOUNT):
            problems.append(f"{kind} {source} -> {target}")
    needs_data = service in DATA_WRITERS or service in OWN_VOLUME
    has_data = any(m.get("Destination") == DATA_MOUNT for m in attrs.get("Mounts") or [])
    if needs_data and not has_data:
        problems.append(f"no data folder at {DATA_MOUNT}")
    reason = "; ".join(problems) or (f"only its own volume at {DATA_MOUNT}" if service in OWN_VOLUME
                                     else f"only the data folder at {DATA_MOUNT} and its keys" if needs_data
                                     else "no host paths but its own keys, read-only")
    return Check(service, "mounts", not problems, reason)


def reached(want: str, got: str) -> bool:
    """A probe's rule: "connected" must connect, "no connection" must not, and "no route"
    must be blocked: not even a refusal, which would prove a route exists."""
    if want == "connected":
        return got == "connected"
    if want == "no connection":
        return got != "connected"
    return got not in ("connected", "refused")


def probes(lab: RunningLab, outside_ip: str | None, host_port: int,
           hints: Mapping[str, str] = HINTS) -> list[Check]:
    """Plan every connection attempt, run them in parallel (most end in a timeout), report in order.
    `hints` name the fix for a failed probe, by check name (compose's: scripts/lab-firewall)."""
    planned: list[tuple[str, str, str | None, int, str]] = []

    def expect(service: str, name: str, host: str | None, port: int, want: str) -> None:
        if service in lab.containers:
            planned.append((service, name, host, port, want))

    broker = lambda network: lab.ip("broker", network)  # noqa: E731  a one-line helper read at its uses below
    model = lab.ip("model", "model")
    expect("reader", "reaches its broker endpoint", broker("readers"), PORTS["reader"], "connected")
    expect("reader", "reaches the model", model, PORTS["model"], "connected")
    for role in ("validator", "actor"):
        expect("reader", f"cannot open the {role} endpoint", broker(f"{role}s"), PORTS[role], "no connection")
        expect("reader", f"{role} endpoint not bound on its network", broker("readers"), PORTS[role], "no connection")
    expect("reader", "cannot open the intake endpoint", broker("edge"), PORTS["intake"], "no connection")
    expect("intake", "reaches the intake endpoint", broker("edge"), PORTS["intake"], "connected")
    for role in ("reader", "validator", "actor"):
        expect("intake", f"{role} endpoint not bound on its network", broker("edge"), PORTS[role], "no connection")
    expect("reader", "cannot reach the actor", lab.ip("actor", "actors"), PORTS["actor"], "no route")
    expect("actor", "cannot reach the model", model, PORTS["model"], "no route")
    expect("validator", "cannot reach the model", model, PORTS["model"], "no route")
    naive_probes(lab, expect)
    for service in COMPOSE_NETWORKS:
        if outside_ip is not None:
            expect(service, "no route outside", outside_ip, 443, "no route")
        if service in lab.containers:
            # No address to probe is no evidence: a FAIL row (attempt), never a missing one.
            targets: list[str | None] = [*lab.gateways(service)] or [None]
            for gateway in targets:
                expect(service, "cannot reach host services", gateway, host_port, "no route")

    def attempt(plan: tuple[str, str, str | None, int, str]) -> Check:
        service, name, host, port, want = plan
        if host is None:
            unknown = UNKNOWN_TARGET.get(name, "target address unknown (is every service running?)")
            return Check(service, name, False, unknown)
        got = lab.probe(service, host, port)
        ok = reached(want, got)
        hint = "" if ok or name not in hints else f"; {hints[name]}"
        return Check(service, name, ok, f"{host}:{port} -> {got} (want {want}){hint}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        checks = list(pool.map(attempt, planned))
    for service, own in OWN_SECRETS.items():
        if service in lab.containers and service != "model":
            found = lab.containers[service].exec_run(["python3", "-c", SECRETS_HELD]).output.decode().split()
            held = {name.removesuffix(".key_secret") for name in found}
            checks.append(Check(service, "holds only its own secret key", held == own,
                                f"/keys holds {sorted(held) or 'no secret key'}; policy {sorted(own)}"))
    if "reader" in lab.containers:
        output = lab.containers["reader"].exec_run(["python3", "-c", NO_TOOL_CODE]).output.decode().strip()
        checks.append(Check("reader", "image has no tool code", output == "clean",
                            "no actor/validator/broker package, catalog or call log" if output == "clean" else output))
    for client, (server, network) in MODEL_OF.items():
        address = lab.ip(server, network)
        if client in lab.containers and address is not None:
            output = lab.containers[client].exec_run(["python3", "-c", MODEL_CLOSED, f"http://{address}:{PORTS['model']}"])
            checks.append(model_closed(output.output.decode(errors="replace"), client))
    return checks


# Each model's client -> (the model's service, the network they share).
MODEL_OF = {"reader": ("model", "model"), "naive": ("naive-model", "naivemodel")}
# The broker's endpoints, each on the network where it is bound (compose.yaml's bind hosts).
ENDPOINT_NETWORKS = {"intake": "edge", "trace": "edge", "reader": "readers", "validator": "validators",
                     "actor": "actors"}


def naive_probes(lab: RunningLab, expect: Callable[[str, str, str | None, int, str], None]) -> None:
    """The naive agent, which obeys whatever an email says, reaches its own model and nothing
    of airlock: no broker endpoint, not the actor, not airlock's model, not the page it is
    fed from (on their shared network the page listens nowhere); its model reaches nothing.
    Host and outside: probes()'s rows for every service. No row where no naive agent runs
    (swarm's stack has none; in compose, inspect() fails its "running" row)."""
    if "naive" not in lab.containers:
        return
    expect("naive", "reaches its own model", lab.ip("naive-model", "naivemodel"), PORTS["model"], "connected")
    expect("dashboard", "reaches the naive agent", lab.ip("naive", "naive"), PORTS["naive"], "connected")
    for endpoint, network in ENDPOINT_NETWORKS.items():
        expect("naive", f"cannot reach the broker's {endpoint} endpoint", lab.ip("broker", network),
               PORTS[endpoint], "no route")
    expect("naive", "cannot reach the actor", lab.ip("actor", "actors"), PORTS["actor"], "no route")
    expect("naive", "cannot reach airlock's model", lab.ip("model", "model"), PORTS["model"], "no route")
    expect("naive", "cannot open the page", lab.ip("dashboard", "naive"), PORTS["dashboard"], "no connection")
    expect("naive", "cannot reach the page's edge address", lab.ip("dashboard", "edge"), PORTS["dashboard"],
           "no route")
    expect("naive-model", "cannot open the naive agent", lab.ip("naive", "naivemodel"), PORTS["naive"],
           "no connection")
    expect("naive-model", "cannot reach the page", lab.ip("dashboard", "naive"), PORTS["dashboard"], "no route")


def model_closed(output: str, client: str = "reader") -> Check:
    """MODEL_CLOSED's four lines, each a closed answer; anything else names what is open."""
    answers = output.splitlines()
    opened = [a for a in answers if not a.strip() or a.split()[-1] not in CLOSED]
    return Check(client, "the model serves it no tools", len(answers) == 4 and not opened,
                 "; ".join(opened)[:300] or "tools, slots and POST /props closed")


def outside_address() -> str | None:
    try:
        found = socket.getaddrinfo(OUTSIDE_HOST, 443, socket.AF_INET, socket.SOCK_STREAM)
        return next(str(a[4][0]) for a in found)  # AF_INET: each address is (host text, port)
    except (OSError, StopIteration):
        return None


def default_project(cwd: Path | None = None) -> str:
    """Compose's default project name: $COMPOSE_PROJECT_NAME, else the folder's name."""
    name = os.environ.get("COMPOSE_PROJECT_NAME") or (cwd or Path.cwd()).name
    return re.sub(r"[^-_a-z0-9]", "", name.lower())


@contextlib.contextmanager
def host_listener() -> Iterator[int]:
    """A listener on every host address, yielding its port: if a container can connect to it
    through its network's gateway, that container can reach services on the host."""
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(16)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def run(project: str, lab: Lab | None = None) -> list[Check]:
    lab = lab or Lab(project)
    if not lab.containers:
        raise UsageError(f"no running containers in compose project {project!r} "
                         "(docker compose up -d first, or --project)")
    with host_listener() as port:
        return inspect(lab) + probes(lab, outside_address(), port)


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    rows = [f"{'service':<10} {'check':<{width}}  result  reason"]
    rows += [f"{c.service:<10} {c.name:<{width}}  {c.status:<6}  {c.reason}" for c in checks]
    failed = sum(c.status == "FAIL" for c in checks)
    gaps = sum(c.gap for c in checks)
    summary = f"{len(checks)} checks: " + (f"{failed} FAIL" if failed else "no FAIL" if gaps else "all PASS")
    rows.append(summary + (f", {gaps} GAP ({GAP_MEANS})" if gaps else ""))
    return "\n".join(rows)


def passed(checks: list[Check]) -> bool:
    """The exit code's rule: only a FAIL fails; a GAP is reported, not failed."""
    return all(c.status != "FAIL" for c in checks)
