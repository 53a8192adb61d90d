"""`airlock swarm render`: the compose lab as a Docker Swarm stack, generated from compose.yaml.

compose.yaml stays the one description of the lab (services, images, environment, networks,
hardening); this turns it into what `docker stack deploy` (3.9, Docker 20.10 to 28) accepts,
rule by rule, and says what swarm cannot keep:

    dropped, stack deploy ignores it    build, restart, depends_on, security_opt (so
                                        no-new-privileges: the images run as uid 10001, have
                                        no setuid binaries, and every capability is dropped)
    dropped, stack deploy drops it      tmpfs (-> a tmpfs-typed mount), ipv4_address (-> the
                                        broker binds on `subnet:` hosts, airlock/bindhosts.py)
    dropped, stack deploy rejects it    mem_limit, memswap_limit, pids_limit (-> deploy.resources
                                        .limits memory and pids, which 20.10 applies; swarm
                                        gives no swap setting)
    kept                                image, environment, read_only, user, cap_drop, healthcheck
    replaced                            key folders -> one swarm secret per key file, at the
                                        same path under /keys, owned by the services' user,
                                        0400; the data folder -> one named volume (broker, actor)
    ports                               host mode (the node's own port, no routing mesh); stack
                                        deploy cannot bind 127.0.0.1: docs/swarm.md
    networks                            overlay, encrypted, internal (but edge), each on a pinned
                                        subnet, so the broker finds its address in each; names
                                        resolve to tasks (dnsrr), not to a virtual IP

Only the pipeline's services go in (broker, reader, validator, actor, model, intake,
dashboard): `init` makes keys and hands folders over (here: `airlock swarm render` makes the
keys, secrets need no owner), `inject`, `approve` and `lab` are tools, and the naive agent
and its model are compose's demonstration, so the page's network to them and its settings
for them (ops/verify.py COMPOSE_ONLY_SETTINGS) stay out too. Runs no docker.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from airlock import bindhosts, keys, settings as settings_module
from airlock.errors import UsageError
from ops import verify

COMPOSE = Path(__file__).resolve().parents[1] / "compose.yaml"
STACK_VERSION = "3.9"  # what 20.10's `docker stack deploy` needs for these keys
SERVICES = ("broker", "reader", "validator", "actor", "model", "intake", "dashboard")
SCALED = ("reader", "model")  # `deploy.replicas` from --readers: one model per reader, as compose's slots
DATA_WRITERS = ("broker", "actor")  # compose's one ./airlock-data, as one named volume both mount
DATA_VOLUME = "data"  # on one node, the same files as compose (the host CLI reads trace and calls there)
KEYS_MOUNT = "/keys"
SECRET_MODE = 0o400  # the services' user reads its keys, nobody else, nobody writes
EDGE = "edge"  # the one network that is not internal: host-mode ports need a way out of the overlay
DEFAULT_SUBNETS = "10.231"  # the first two octets of the /24 each network gets (10.231.0.0/24 ...)
NETWORK_ORDER = ("edge", "readers", "model", "validators", "actors")  # subnet N is 10.231.N.0/24
# Service keys that stack deploy ignores, silently drops or rejects: none may remain.
UNSUPPORTED = frozenset({"build", "restart", "depends_on", "security_opt", "tmpfs", "mem_limit", "memswap_limit",
                         "pids_limit", "profiles", "network_mode", "container_name", "cap_add"})
KEPT = ("image", "environment", "read_only", "user", "cap_drop", "healthcheck", "entrypoint", "working_dir")
STACK_NAME = re.compile(r"[a-z][a-z0-9-]{0,19}")  # short: it prefixes every secret, volume and network
FIRST_OCTETS = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")  # ASCII digits: \d takes any script's
MAX_CPUS = 256.0
PRIVATE = tuple(ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))  # RFC 1918
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?::-(?P<default>[^}]*))?\}")


def check_stack_name(stack: str) -> None:
    if not STACK_NAME.fullmatch(stack):
        raise UsageError(f"stack name {stack!r}: lower case letters, digits and -, starting with a letter, at most 20")


def interpolated(text: str, env: Mapping[str, str]) -> str:
    """compose's ${NAME:-default} and ${NAME}, as compose reads them (an empty value takes
    the default); only the forms compose.yaml uses."""
    return INTERPOLATION.sub(lambda m: env.get(m["name"]) or (m["default"] or ""), text)


def read_compose(env: Mapping[str, str], path: Path = COMPOSE) -> dict[str, Any]:
    """compose.yaml, variables filled from `env` (default values when unset), anchors merged."""
    loaded = yaml.safe_load(interpolated(path.read_text(encoding="utf-8"), env))
    if not isinstance(loaded, dict) or "services" not in loaded:
        raise UsageError(f"{path} is not the lab's compose file")
    return loaded


def subnets(first_octets: str) -> dict[str, ipaddress.IPv4Network]:
    """Each network's pinned /24: NETWORK_ORDER's Nth is <first_octets>.N.0/24, in RFC 1918's
    ranges only (a /24 of someone's public or loopback range is a typo); UsageError otherwise."""
    try:
        if not FIRST_OCTETS.fullmatch(first_octets):
            raise ValueError("not two numbers")
        pinned = {name: ipaddress.IPv4Network(f"{first_octets}.{number}.0/24")
                  for number, name in enumerate(NETWORK_ORDER)}
    except ValueError:
        pinned = {}
    if not pinned or not all(any(n.subnet_of(block) for block in PRIVATE) for n in pinned.values()):
        raise UsageError(f"--subnets {first_octets!r}: the first two octets of private /24s, such as 10.231")
    return pinned


def secret_name(stack: str, service: str, relative: Path, content: bytes) -> str:
    """A swarm secret's name: stack, service and a digest of the file's path and content.
    Secrets cannot change, so new keys (or a new file) get new names, and swarm's 64
    characters hold any person's key file name (labels carry the readable path)."""
    digest = hashlib.sha256(relative.as_posix().encode() + b"\0" + content).hexdigest()[:12]
    return f"{stack}_{service}_{digest}"


def key_secrets(stack: str, keys_folder: Path) -> dict[str, dict[str, tuple[Path, Path]]]:
    """service -> secret name -> (the key file, its path under the service's /keys): every
    file `airlock keys` put in keys/services/<service> (the model: none)."""
    found: dict[str, dict[str, tuple[Path, Path]]] = {}
    for service in SERVICES:
        folder = keys_folder / "services" / service
        files = sorted(p for p in folder.rglob("*") if p.is_file()) if service in keys.SERVICE_KEYS else []
        found[service] = {secret_name(stack, service, p.relative_to(folder), p.read_bytes()):
                          (p, p.relative_to(folder)) for p in files}
    return found


def published(short: str) -> dict[str, Any]:
    """compose's "127.0.0.1:7401:7401" as a host-mode port: the node's own port, not the
    routing mesh; the address cannot be kept (stack deploy binds every interface)."""
    *_, host_port, container_port = short.split(":")
    return {"target": int(container_port), "published": int(host_port), "protocol": "tcp", "mode": "host"}


def user_ids(user: str) -> tuple[str, str]:
    uid, _, gid = user.partition(":")
    return uid, gid or uid


def service(name: str, spec: dict[str, Any], secrets: dict[str, tuple[Path, Path]], replicas: int) -> dict[str, Any]:
    out = {key: spec[key] for key in KEPT if key in spec}
    # As strings, as compose passes them (YAML reads AIRLOCK_MODEL_TIMEOUT_S: 30 as a number).
    # Less the settings for compose's naive agent, which the stack does not run (verify.py).
    out["environment"] = {key: "" if value is None else str(value) for key, value in spec["environment"].items()
                          if key not in verify.COMPOSE_ONLY_SETTINGS.get(name, ())}
    uid, gid = user_ids(str(spec["user"]))
    # /tmp as compose's tmpfs, with its size: a tmpfs-typed mount, which stack deploy keeps.
    tmp_size = re.search(r"size=(\d+)m", " ".join(spec.get("tmpfs", [])))
    volumes: list[dict[str, Any]] = [{"type": "tmpfs", "target": "/tmp",
                                      "tmpfs": {"size": int(tmp_size[1] if tmp_size else 16) * 2**20}}]
    if name in DATA_WRITERS:
        volumes.append({"type": "volume", "source": DATA_VOLUME, "target": "/data"})
    out["volumes"] = volumes
    if secrets:  # the model holds no key
        out["secrets"] = [{"source": secret, "target": f"{KEYS_MOUNT}/{relative.as_posix()}",
                           "uid": uid, "gid": gid, "mode": SECRET_MODE} for secret, (_, relative) in secrets.items()]
    networks = spec.get("networks", [])
    # A list or a mapping of name -> ipv4_address: the names only, of the pipeline's networks.
    out["networks"] = sorted(network for network in networks if network in NETWORK_ORDER)
    if "ports" in spec:
        out["ports"] = [published(str(port)) for port in spec["ports"]]
    # dnsrr: a service's name resolves to its tasks' own addresses. The default, a virtual IP
    # balanced by IPVS, answered nothing on internal overlays (Docker 20.10, measured: "no
    # route to host" from the reader to the broker's VIP), and host-mode ports need no VIP.
    out["deploy"] = {"replicas": replicas, "endpoint_mode": "dnsrr",
                     "resources": {"limits": {"memory": spec["mem_limit"], "pids": spec["pids_limit"]}}}
    return out


def broker_bind_hosts(compose_broker: dict[str, Any], pinned: dict[str, ipaddress.IPv4Network]) -> dict[str, str]:
    """The broker's AIRLOCK_*_BIND_HOST, each compose address replaced by `subnet:` of the
    network compose gave that address: the endpoint stays on its role's network. An endpoint
    whose port compose publishes (the intake) also binds on `default-route`: a host-mode
    port arrives at the task's docker_gwbridge address, on no overlay (airlock/bindhosts.py)."""
    network_of = {str(attached["ipv4_address"]): network
                  for network, attached in compose_broker["networks"].items()}
    published_ports = {published(str(port))["target"] for port in compose_broker.get("ports", [])}
    environment = compose_broker["environment"]
    hosts = {}
    for key, value in environment.items():
        if not key.endswith("_BIND_HOST"):
            continue
        name = key.removeprefix("AIRLOCK_").removesuffix("_BIND_HOST").lower()
        port = int(environment.get(f"AIRLOCK_{name.upper()}_PORT", settings_module.DEFAULT_PORTS[name]))
        extra = f"{bindhosts.SEPARATOR}{bindhosts.DEFAULT_ROUTE}" if port in published_ports else ""
        hosts[key] = f"{bindhosts.SUBNET_PREFIX}{pinned[network_of[value]]}{extra}"
    return hosts


def render(stack: str, keys_folder: Path, readers: int = 1, env: Mapping[str, str] | None = None,
           first_octets: str = DEFAULT_SUBNETS, compose: Path = COMPOSE,
           model_cpus: float | None = None) -> dict[str, Any]:
    """The stack, as a mapping for yaml.safe_dump; reads the key files (their names and
    digests), writes nothing. `model_cpus`: each model replica's CPU limit, which its
    llama-server's threads follow (model/serve.sh); none: the node's CPUs, each."""
    check_stack_name(stack)
    if readers < 1:
        raise UsageError("--readers must be at least 1")
    if model_cpus is not None and not 0 < model_cpus <= MAX_CPUS:
        raise UsageError(f"--model-cpus must be above 0 and at most {MAX_CPUS}")
    pinned = subnets(first_octets)
    source = read_compose(os.environ if env is None else env, compose)
    secrets = key_secrets(stack, keys_folder)
    services = {name: service(name, source["services"][name], secrets[name], readers if name in SCALED else 1)
                for name in SERVICES}
    if model_cpus is not None:
        # Several models on one node each take every CPU without this: 3 replicas on 2 cores
        # ran at a third of one replica's pace (measured, docs/swarm.md).
        services["model"]["deploy"]["resources"]["limits"]["cpus"] = f"{model_cpus:g}"
    services["broker"]["environment"] = {**source["services"]["broker"]["environment"],
                                         **broker_bind_hosts(source["services"]["broker"], pinned)}
    networks = {name: {"driver": "overlay", "internal": name != EDGE, "driver_opts": {"encrypted": "true"},
                       "ipam": {"config": [{"subnet": str(pinned[name])}]}} for name in NETWORK_ORDER}
    return {
        "version": STACK_VERSION,
        "services": services,
        "networks": networks,
        "volumes": {DATA_VOLUME: {}},
        "secrets": {secret: {"external": True} for named in secrets.values() for secret in named},
    }


HEADER = """\
# Made by `airlock swarm render` from compose.yaml (ops/swarm.py says what changed and why).
# Deploy with `airlock swarm up`, which makes the external secrets first. Host-mode ports
# listen on every interface of the node: docs/swarm.md says how to close them.
# Secrets' mode 256 is 0400.
"""


class _NoAliases(yaml.SafeDumper):
    """Every list written out in full: the shared `cap_drop: [ALL]` as no &id001 anchor."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write(stack_file: Path, stack: dict[str, Any]) -> None:
    stack_file.write_text(HEADER + yaml.dump(stack, Dumper=_NoAliases, sort_keys=False, width=120), encoding="utf-8")
