"""`airlock verify --swarm --stack NAME`: verify's evidence, on a running Docker Swarm stack.

The same checks as compose's (ops/verify.py) where swarm gives the same facts: user,
read-only root, capabilities, privileged, network mode, the network policy, every probe.
Where swarm differs, the evidence is read another way and said as it is:

    no-new-privileges   stack deploy cannot set it: read from inside (/proc/1/status), PASS
                        if NoNewPrivs is 1 (daemon.json "no-new-privileges": true gives it);
                        GAP when compensated (bounding set empty, no setuid/setgid file the
                        service's user could exec, by a scan that listed every folder that
                        user can read or search); else FAIL
    pids limit          the engine takes one from API 1.41 (Docker 20.10: Resources.Limits.Pids,
                        `deploy.resources.limits.pids`); nothing stands in for it, so unset is a
                        FAIL, and before 1.41 too (the engine cannot set it: upgrade)
    memory, no swap     a service has no swap setting: MemorySwap is docker's default, twice
                        the memory (GAP); no memory limit, or any other swap, is a FAIL
    mounts              keys are swarm secrets, absent from inspect's Mounts: read from inside
                        that each is mounted read-only (/proc/self/mountinfo) and each file
                        under /keys is mode 0400 and the container user's (stat); the data
                        folder is a named volume; any bind of the host is a problem
    networks            overlays, not bridges: scripts/lab-firewall's al-* names do not apply.
                        Each must be encrypted and internal, but edge, whose task containers
                        leave by docker_gwbridge (each must be on it): its NAT (on, as swarm
                        init makes it) is a GAP that scripts/lab-firewall --swarm closes, judged
                        after the probes: only if that service's "no route outside" and
                        "cannot reach host services" probes ran and passed, else a FAIL
    intake on gwbridge  host-mode published ports arrive at the broker task's docker_gwbridge
                        address, where the broker also binds its intake: from this process,
                        the intake there connects and no other endpoint does; from the reader,
                        validator and actor, that address has no route
    host services       an overlay's gateway address is the bridge inside that overlay's own
                        namespace, not the host; the host is docker_gwbridge's gateway (for
                        containers on it) and the node's address, so those are probed, and
                        each overlay's gateway is probed apart for what it is. A node advertised
                        at a loopback address (swarm init --advertise-addr 127.0.0.1) is probed
                        at this host's default-route address instead: inside a task, 127.0.0.1
                        is the task's own loopback, where "refused" says nothing of the host
                        and no firewall rule could change the answer (host_addresses)

There is no init service on a swarm (`airlock swarm render` makes the keys), so no init checks.
Scaled services (reader, model) are inspected replica by replica; probes run from one.
"""

from __future__ import annotations

import concurrent.futures
import errno
import ipaddress
import json
import socket
from collections.abc import Callable, Sequence
from typing import Any

from airlock.errors import UsageError
from ops import verify
from ops.verify import Check, RunningLab, Status

STACK_LABEL = "com.docker.stack.namespace"
SERVICE_LABEL = "com.docker.swarm.service.name"  # <stack>_<service>
TASK_LABEL = "com.docker.swarm.task.name"  # <stack>_<service>.<slot>.<task id>
GWBRIDGE = "docker_gwbridge"  # where a task on a non-internal overlay leaves the node
EDGE = "edge"
SWARM_PIDS_API = (1, 41)  # the first engine API whose services take Resources.Limits.Pids
SETID = 0o6000  # setuid | setgid
SHOWN_SETID = 4  # setuid/setgid files (or unlisted folders) named in a reason before "and N more"
KEY_MODE = 0o400  # a secret's mode as `airlock swarm render` sets it (ops/swarm.py SECRET_MODE)
# What to do about a failed probe on a swarm: the firewall's --swarm covers docker_gwbridge too.
HINTS = {
    "no route outside": f"the edge overlay leaves by {GWBRIDGE}, which NATs out: run scripts/lab-firewall --swarm",
    "cannot reach host services": f"edge's tasks reach the host by {GWBRIDGE}: run scripts/lab-firewall --swarm",
}
# Where a UDP socket is connected to learn this host's default-route address: TEST-NET-1
# (RFC 5737). Connecting a UDP socket only asks the kernel for a route; nothing is sent.
ROUTE_PROBE = ("192.0.2.1", 9)

# Run in each task container, as its user: what the kernel holds of its process 1, every
# setuid or setgid file under the root given (default /; not /proc, /sys, /dev), each folder the
# walk could not list with whether this user may read it and search it, the mount options of
# each key secret, the mode and owner of each file under the keys folder (default /keys), its uid.
PRIVILEGES = r"""
import json, os, stat, sys
top = sys.argv[1] if len(sys.argv) > 1 else "/"
keys_top = sys.argv[2] if len(sys.argv) > 2 else "/keys"
status = dict(line.split(":", 1) for line in open("/proc/1/status") if ":" in line)
setid, unread = [], []
def failed(error):
    unread.append([error.filename, os.access(error.filename, os.R_OK), os.access(error.filename, os.X_OK)])
for root, dirs, files in os.walk(top, onerror=failed):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in files:
        path = os.path.join(root, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) and mode & 0o6000:
            setid.append(path)
keys = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4] == "/keys" or fields[4].startswith("/keys/"):
        keys[fields[4]] = fields[5]
keyfiles = {}
def unlisted(error):
    if not (isinstance(error, FileNotFoundError) and error.filename == keys_top):  # no folder: no key (the model)
        keyfiles[error.filename] = None
for root, dirs, files in os.walk(keys_top, onerror=unlisted):
    for name in files:
        path = os.path.join(root, name)
        try:
            found = os.stat(path)
            keyfiles[path] = [stat.S_IMODE(found.st_mode), found.st_uid]
        except OSError:
            keyfiles[path] = None
print(json.dumps({"NoNewPrivs": status.get("NoNewPrivs", "").strip(), "CapBnd": status.get("CapBnd", "").strip(),
                  "CapEff": status.get("CapEff", "").strip(), "setid": sorted(setid), "unread": sorted(unread),
                  "keys": keys, "keyfiles": keyfiles, "uid": os.getuid()}))
"""


def api_version(text: str) -> tuple[int, int]:
    """'1.41' -> (1, 41); anything unreadable is (0, 0), the oldest."""
    major, _, minor = text.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (0, 0)


def reaches_the_host(address: str | None) -> bool:
    """Whether a task container that connects to `address` would be connecting to this host.
    Not a loopback address (127.0.0.0/8, ::1): inside a task it is the task's own network
    namespace, so its probe is answered by the task ("refused": nothing listens there), never
    the host, whatever the firewall does; not the unspecified address, which a connect also
    takes as the local one. Anything that is no IP address is no target either."""
    try:
        parsed = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return not (parsed.is_loopback or parsed.is_unspecified)


def default_route_address() -> str | None:
    """This host's source address on its default route (what `docker swarm init` advertises
    when not told), or None without a default route or when it is loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as route:
            route.connect(ROUTE_PROBE)
            address = str(route.getsockname()[0])
    except OSError:
        return None
    return address if reaches_the_host(address) else None


def task_slot(container: Any) -> str:
    """The replica's slot from its task name (sdev_reader.2.x1z8... -> "2")."""
    parts = container.labels.get(TASK_LABEL, "").split(".")
    return parts[1] if len(parts) == 3 else ""


class SwarmLab(RunningLab):
    """A running stack, read through the docker SDK from a manager of its swarm: each
    service's running task containers (by the stack's labels), the stack's networks by the
    name the stack gave them (sdev_edge -> edge), docker_gwbridge, the node's address."""

    def __init__(self, stack: str, client: Any = None) -> None:
        client = client if client is not None else verify.docker_client()
        swarm = client.info().get("Swarm") or {}
        if swarm.get("LocalNodeState") != "active":
            raise UsageError("this Docker engine is in no swarm: verify --swarm needs a node of the stack's swarm")
        self.stack, prefix, label = stack, f"{stack}_", f"{STACK_LABEL}={stack}"
        replicas: dict[str, list[Any]] = {}
        for container in client.containers.list(filters={"label": label}):
            full = container.labels.get(SERVICE_LABEL, "")
            if full.startswith(prefix) and container.status == "running":
                replicas.setdefault(full.removeprefix(prefix), []).append(container)
        # Lowest slot first (the one probes run from); a slot's old and new task by name.
        self.replicas = {service: sorted(found, key=lambda c: (len(task_slot(c)), task_slot(c), c.name))
                         for service, found in replicas.items()}
        networks = {n.name.removeprefix(prefix): n.attrs for n in client.networks.list(filters={"label": label})
                    if n.name.startswith(prefix)}
        super().__init__(client, {s: found[0] for s, found in self.replicas.items()}, networks, init=None)
        # greedy: the full inspect, whose Containers say which task containers are on it
        self.gwbridge: dict = next((n.attrs for n in client.networks.list(names=[GWBRIDGE], greedy=True)
                              if n.name == GWBRIDGE), {})
        self.node_address: str | None = swarm.get("NodeAddr") or None
        self.api = api_version(str(client.version().get("ApiVersion", "")))

    def on_gwbridge(self, container: Any) -> bool:
        return container.id in (self.gwbridge.get("Containers") or {})

    def host_addresses(self) -> list[str]:
        """This host's address for every task to probe: the node's swarm address, or, when
        that is loopback, this host's default-route address. verify lists the containers of
        the engine it talks to and listens for the probes here, so this host is their node.
        One address is enough: scripts/lab-firewall --swarm drops by the bridge a connection
        comes in on, not by the address it was sent to, and an internal overlay has no route
        to any address of the host."""
        if reaches_the_host(self.node_address):
            return [str(self.node_address)]
        route = default_route_address()
        return [route] if route else []

    def gateways(self, service: str) -> list[str]:
        """The host's addresses a task container could try: docker_gwbridge's gateway when it
        is on that bridge, and the node's own (host_addresses); empty when there is none,
        which verify.probes reports as a FAIL, not as no row."""
        found = []
        container = self.containers[service]
        if self.on_gwbridge(container) or EDGE in self.logical_networks(container):  # edge's must be on it
            found += [c["Gateway"] for c in (self.gwbridge.get("IPAM") or {}).get("Config") or [] if c.get("Gateway")]
        return found + [address for address in self.host_addresses() if address not in found]

    def gwbridge_address(self, service: str) -> str | None:
        """The service's (first) task container's address on docker_gwbridge, without its /prefix."""
        container = self.containers.get(service)
        found = (self.gwbridge.get("Containers") or {}).get(container.id, {}) if container is not None else {}
        return str(found.get("IPv4Address") or "").partition("/")[0] or None

    def overlay_gateway(self, network: str) -> str | None:
        configs = (self.networks.get(network, {}).get("IPAM") or {}).get("Config") or []
        return next((c["Gateway"] for c in configs if c.get("Gateway")), None)


def replica_name(service: str, container: Any, replicas: int) -> str:
    """How a row names a replica: the service alone, or with its slot when scaled (reader.2)."""
    return f"{service}.{task_slot(container)}" if replicas > 1 else service


def service_of(name: str) -> str:
    """A row's service: reader.2 -> reader."""
    return name.partition(".")[0]


def privileges_seen(output: str) -> dict | None:
    """PRIVILEGES' one JSON line, or None when it did not run (the reason then shows the output)."""
    try:
        seen = json.loads(output)
    except ValueError:
        return None
    wanted = {"NoNewPrivs", "CapBnd", "setid", "unread", "keys", "keyfiles", "uid"}
    return seen if isinstance(seen, dict) and wanted <= set(seen) else None


def named(paths: list[str]) -> str:
    more = len(paths) - SHOWN_SETID
    return ", ".join(paths[:SHOWN_SETID]) + (f" and {more} more" if more > 0 else "")


def scan_gaps(unread: list[list]) -> tuple[list[str], int]:
    """The folders the scan could not list, as (those that leave it incomplete, how many it may skip).
    Rationale: the scan runs as the service's user. To exec a file, that user must search
    (x) every folder on its path; a folder it can neither read nor search hides nothing it
    could exec, so it is skipped (root's /root, /etc/ssl/private). One it may read or search
    yet could not list may hold a setuid file it can exec: the scan is incomplete."""
    incomplete = sorted(path for path, readable, searchable in unread if readable or searchable)
    return incomplete, len(unread) - len(incomplete)


def no_new_privileges(security_opt: list[str], seen: dict) -> tuple[Status, str]:
    # Data: SecurityOpt (what the engine was told), process 1's NoNewPrivs and CapBnd, the
    # image's setuid/setgid files and the folders the scan could not list. Rationale: without
    # no-new-privileges, exec of a setuid file can gain privileges; with no capability left to
    # gain and no such file the service's user can reach, nothing can (scan_gaps).
    if verify._no_new_privileges({"HostConfig": {"SecurityOpt": security_opt}})[0] or seen["NoNewPrivs"] == "1":
        return "PASS", f"NoNewPrivs={seen['NoNewPrivs']} SecurityOpt={security_opt}"
    bounded = seen["CapBnd"] != "" and seen["CapBnd"].strip("0") == ""  # hex, every bit clear
    setid: list[str] = seen["setid"]
    incomplete, skipped = scan_gaps(seen["unread"])
    if bounded and not setid and not incomplete:
        return "GAP", (f"NoNewPrivs={seen['NoNewPrivs']} (stack deploy cannot set it); compensated: "
                       f"CapBnd=0, no setuid/setgid file on the image ({skipped} folders its user can "
                       "neither read nor search skipped: it cannot exec what they hold)")
    return "FAIL", (f"NoNewPrivs={seen['NoNewPrivs']}, not compensated: CapBnd={seen['CapBnd']}; "
                    f"setuid/setgid: {named(setid) or 'none'}"
                    + (f"; scan incomplete, could not list: {named(incomplete)}" if incomplete else ""))


def pids_limit(attrs: dict, api: tuple[int, int]) -> tuple[Status, str]:
    value = attrs["HostConfig"].get("PidsLimit")
    if value and value > 0:
        return "PASS", f"PidsLimit={value}"
    if api < SWARM_PIDS_API:  # not a GAP: nothing checked stands in for a fork bomb's limit
        return "FAIL", (f"PidsLimit={value}: engine API {api[0]}.{api[1]} cannot set it for a service; "
                        "upgrade the engine (API 1.41, Docker 20.10)")
    return "FAIL", (f"PidsLimit={value}: engine API {api[0]}.{api[1]} takes deploy.resources.limits.pids; "
                    "the stack sets none")


def memory(attrs: dict) -> tuple[Status, str]:
    memory, swap = attrs["HostConfig"].get("Memory") or 0, attrs["HostConfig"].get("MemorySwap")
    shown = f"Memory={memory} MemorySwap={swap}"
    if memory > 0 and swap == memory:
        return "PASS", f"{shown} (equal: no swap)"
    if memory > 0 and swap == 2 * memory:
        return "GAP", f"{shown}: a service has no swap setting, docker's default swaps as much again"
    return "FAIL", f"{shown} (want a memory limit and no swap)"


def mounts(name: str, attrs: dict) -> Check:
    """Only /tmp's tmpfs and, for the data writers, the data volume: keys are secrets, which
    inspect does not list, so a bind of the host (at /keys or anywhere) is not the stack's."""
    service, problems = service_of(name), []
    for mount in attrs.get("Mounts") or []:
        source, target, kind = mount.get("Source", ""), mount.get("Destination", ""), mount.get("Type")
        if "docker.sock" in source or "docker.sock" in target:
            problems.append(f"Docker socket at {target}")
        elif kind == "volume" and service in verify.DATA_WRITERS and target == verify.DATA_MOUNT:
            continue
        elif kind in ("bind", "volume"):
            problems.append(f"{kind} {source} -> {target}" + (" (keys are secrets on a swarm)"
                                                               if target.startswith(verify.KEYS_MOUNT) else ""))
    if service in verify.DATA_WRITERS and not any(
            m.get("Destination") == verify.DATA_MOUNT and m.get("Type") == "volume" for m in attrs.get("Mounts") or []):
        problems.append(f"no data volume at {verify.DATA_MOUNT}")
    held = "the data volume at /data, " if service in verify.DATA_WRITERS else ""
    return Check(name, "mounts", not problems, "; ".join(problems) or f"{held}no host paths (keys: secrets)")


def keys_read_only(name: str, seen: dict) -> Check:
    """Each secret under /keys mounted read-only, as /proc/self/mountinfo shows it, and each
    file there mode 0400 and owned by the container's uid (what the probe ran as), as stat
    shows it; the model holds none (verify.OWN_SECRETS), every other service some."""
    keys: dict[str, str] = seen["keys"]
    files: dict[str, list[int] | None] = seen["keyfiles"]
    writable = sorted(path for path, options in keys.items() if "ro" not in options.split(","))
    if writable:
        return Check(name, "keys read-only", False, f"writable: {', '.join(writable)}")
    wrong = [f"{path} not stat'ed" for path in sorted(set(keys) - set(files))]
    for path, found in sorted(files.items()):
        if found is None:
            wrong.append(f"{path} cannot be stat'ed")
        elif found != [KEY_MODE, seen["uid"]]:
            wrong.append(f"{path} mode {found[0]:04o} uid {found[1]}")
    if wrong:
        return Check(name, "keys read-only", False,
                     f"want mode {KEY_MODE:04o}, uid {seen['uid']}: " + "; ".join(wrong))
    if bool(keys) != bool(verify.OWN_SECRETS.get(service_of(name))):
        return Check(name, "keys read-only", False, f"{len(keys)} secrets under /keys; policy: "
                     + ("none, it holds no key" if keys else "its own keys"))
    return Check(name, "keys read-only", True, f"{len(keys)} secrets under /keys, all read-only, "
                 f"mode {KEY_MODE:04o}, uid {seen['uid']}" if keys
                 else "no secret under /keys: it holds no key")


def edge_nat(name: str, on_gwbridge: bool, masquerade: str | None, evidence: Sequence[Check]) -> tuple[Status, str]:
    # Data: whether the task container is on docker_gwbridge, that bridge's masquerade option,
    # the service's probe rows. Rationale: edge is not internal, so each task on it leaves by
    # docker_gwbridge; swarm init turns its NAT on for the whole node, which only the
    # firewall closes: a GAP only where the probes from that service show it closed.
    if not on_gwbridge:
        return "FAIL", (f"not on {GWBRIDGE}: edge is not internal, so each of its tasks must leave by it "
                        "(and be probed there)")
    shown = f"leaves by {GWBRIDGE}: enable_ip_masquerade={masquerade}"
    if masquerade == "false":
        return "PASS", shown
    service, missing = service_of(name), []
    for probe in ("no route outside", "cannot reach host services"):
        rows = [c for c in evidence if c.service == service and c.name == probe]
        if not rows:
            missing.append(f"'{probe}' not probed" + (f" ({verify.OUTSIDE_HOST} did not resolve?)"
                                                      if probe == "no route outside" else ""))
        elif not all(c.ok for c in rows):
            missing.append(f"'{probe}' failed")
    if missing:
        return "FAIL", f"{shown}; nothing shows it closed: {'; '.join(missing)}"
    return "GAP", (f"{shown}; closed for what a task starts (scripts/lab-firewall --swarm): "
                   "'no route outside' and 'cannot reach host services' passed")


def network_checks(lab: SwarmLab, name: str, container: Any, evidence: Sequence[Check] = ()) -> list[Check]:
    checks = []
    for network in sorted(lab.logical_networks(container)):
        attrs = lab.networks.get(network, {})
        options = attrs.get("Options") or {}
        encrypted = "encrypted" in options and options["encrypted"] != "false"
        checks.append(Check(name, f"network {network}: encrypted overlay",
                            attrs.get("Driver") == "overlay" and encrypted,
                            f"driver={attrs.get('Driver')} encrypted={options.get('encrypted', '(unset)')}"))
        if network != EDGE:
            internal = bool(attrs.get("Internal"))
            checks.append(Check(name, f"network {network}: internal", internal, f"Internal={internal}"))
        else:
            masquerade = (lab.gwbridge.get("Options") or {}).get("com.docker.network.bridge.enable_ip_masquerade")
            checks.append(Check.judged(name, f"network {network}: no NAT out",
                                       *edge_nat(name, lab.on_gwbridge(container), masquerade, evidence)))
    return checks


def inspections(name: str, attrs: dict, api: tuple[int, int], seen: dict | None, output: str) -> list[Check]:
    """verify.INSPECTIONS in their order, the three swarm cannot keep judged by their swarm rules."""
    checks = []
    for check, rule in verify.INSPECTIONS.items():
        if check == "no-new-privileges" and seen is None:
            checks.append(Check(name, check, False, f"privileges probe did not run: {output[:200]}"))
        elif check == "no-new-privileges" and seen is not None:
            checks.append(Check.judged(name, check, *no_new_privileges(attrs["HostConfig"].get("SecurityOpt") or [],
                                                                         seen)))
        elif check == "pids limit":
            checks.append(Check.judged(name, check, *pids_limit(attrs, api)))
        elif check == "memory, no swap":
            checks.append(Check.judged(name, check, *memory(attrs)))
        else:
            checks.append(Check(name, check, *rule(attrs)))
    return checks


def inspect(lab: SwarmLab, evidence: Sequence[Check] = ()) -> list[Check]:
    """Every replica's inspections; `evidence`, the probes' rows, decides the edge's NAT (edge_nat)."""
    checks = []
    for service, expected in verify.NETWORKS.items():
        replicas = lab.replicas.get(service) or []
        if not replicas:
            checks.append(Check(service, "running", False, "no running task container for this service"))
        if service == "broker":
            # the workers find the broker by name (dnsrr): a second task would split the
            # messages, the call log and the trace between two brokers that know nothing of each other
            checks.append(Check(service, "one broker", len(replicas) == 1,
                                f"{len(replicas)} running task(s); policy exactly one"))
        for container in replicas:
            name = replica_name(service, container, len(replicas))
            container.reload()
            attrs = container.attrs
            # as the container's user: a folder it cannot search hides nothing it can exec (scan_gaps)
            output = container.exec_run(["python3", "-c", PRIVILEGES]).output.decode(errors="replace").strip()
            seen = privileges_seen(output)
            checks += inspections(name, attrs, lab.api, seen, output)
            checks.append(mounts(name, attrs))
            if seen is not None:
                checks.append(keys_read_only(name, seen))
            networks = set(lab.logical_networks(container))
            checks.append(Check(name, "networks", networks == expected,
                                f"on {sorted(networks)}; policy {sorted(expected)}"))
            checks += network_checks(lab, name, container, evidence)
    return checks


def overlay_gateways(lab: SwarmLab, host_port: int) -> list[Check]:
    """Each overlay's gateway, from the first service on it: its own namespace's bridge, so
    anything but `connected` to the host's listener shows it is not the host."""
    checks = []
    for network in sorted(lab.networks):
        service = next((s for s, c in lab.containers.items() if network in lab.logical_networks(c)), None)
        gateway = lab.overlay_gateway(network)
        if service is None or gateway is None:
            continue
        got = lab.probe(service, gateway, host_port)
        checks.append(Check(service, f"network {network}: gateway not the host", got != "connected",
                            f"{gateway}:{host_port} -> {got} (want no connection: the overlay's own bridge)"))
    return checks


def connect(host: str, port: int) -> str:
    """A connection from this process, said in verify.PROBE's words (connected, refused,
    timeout, no-name, unreachable:ERRNO): what a container's probe would print."""
    try:
        socket.create_connection((host, port), timeout=verify.PROBE_TIMEOUT_S).close()
    except TimeoutError:  # socket.timeout
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except socket.gaierror:
        return "no-name"
    except OSError as exc:
        return "unreachable:" + errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "connected"


def intake_on_gwbridge(lab: SwarmLab, connect: Callable[[str, int], str] = connect) -> list[Check]:
    """The broker's intake bound on its docker_gwbridge address (where host-mode published ports
    arrive): from this process (the host, on that bridge) the intake connects and no other
    endpoint does; from the reader, validator and actor, the address has no route."""
    address = lab.gwbridge_address("broker")
    planned = [("host", "reaches the broker's intake on docker_gwbridge", verify.PORTS["intake"], "connected")]
    planned += [("host", f"{role} endpoint not bound on docker_gwbridge", verify.PORTS[role], "no connection")
                for role in ("reader", "validator", "actor", "trace")]
    planned += [(service, "cannot reach the broker on docker_gwbridge", verify.PORTS["intake"], "no route")
                for service in ("reader", "validator", "actor") if service in lab.containers]

    def attempt(plan: tuple[str, str, int, str]) -> Check:
        service, name, port, want = plan
        if address is None:
            return Check(service, name, False, f"the broker has no address on {GWBRIDGE} (is it running, on edge?)")
        got = connect(address, port) if service == "host" else lab.probe(service, address, port)
        return Check(service, name, verify.reached(want, got), f"{address}:{port} -> {got} (want {want})")

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(attempt, planned))


def run(stack: str, lab: SwarmLab | None = None, connect: Callable[[str, int], str] = connect) -> list[Check]:
    """The probes first, since the edge's NAT is judged on them; the inspections' rows first in the table."""
    lab = lab or SwarmLab(stack)
    if not lab.containers:
        raise UsageError(f"no running task containers in stack {stack!r} (airlock swarm up first, or --stack)")
    with verify.host_listener() as port:
        found = (verify.probes(lab, verify.outside_address(), port, HINTS) + intake_on_gwbridge(lab, connect)
                 + overlay_gateways(lab, port))
    return inspect(lab, found) + found
