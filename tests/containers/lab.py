"""One test run's own compose lab, on an engine other people may be using.

Everything that could meet another lab on the same engine is this run's own: the compose
project name, the image tag, the /24 the networks are cut from, the bridge names and the
published ports. The lab runs from a copy of the repository in a temporary folder, the way
a newcomer runs it from a fresh clone: `docker compose up -d --build` with nothing before
it, and the host CLI with no AIRLOCK_KEYS. Teardown touches only this run's project and
this run's image tags (the layers stay: the next build is quick).
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from docker import errors as docker_errors

from airlock import records, trace
from ops.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800  # the model image compiles llama.cpp the first time
PROJECT_PREFIX = "airlocktest"
IMAGES = ("broker", "reader", "validator", "actor", "model", "naive", "intake", "dashboard", "cli",
          "lab")  # compose.yaml's
SUBNET_POOL = ipaddress.IPv4Network("172.31.0.0/16")  # each run takes one free /24 of it
# Set outside, these would point the lab or the host CLI somewhere else than docs/compose.md says.
NOT_INHERITED = ("AIRLOCK_KEYS", "AIRLOCK_KEYS_DIR", "AIRLOCK_DATA", "AIRLOCK_DATA_DIR", "AIRLOCK_UID",
                 "AIRLOCK_GID", "AIRLOCK_TAG", "AIRLOCK_SUBNET", "AIRLOCK_BRIDGE", "AIRLOCK_DEMO_TASK",
                 "AIRLOCK_NAIVE_MODEL", "COMPOSE_PROJECT_NAME", "COMPOSE_FILE", "COMPOSE_PROFILES")
Runner = Callable[..., subprocess.CompletedProcess[str]]


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


def free_network(used: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network], rng: random.Random,
                 pool: ipaddress.IPv4Network, prefix: int) -> ipaddress.IPv4Network:
    """A /`prefix` of `pool` overlapping none of `used`, at random (two runs starting at once
    rarely pick the same)."""
    taken = [net for net in used if net.version == 4]
    free = [net for net in pool.subnets(new_prefix=prefix) if not any(net.overlaps(t) for t in taken)]
    if not free:
        raise RuntimeError(f"no free /{prefix} left in {pool} on this engine and host")
    return rng.choice(free)


def free_subnet(used: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network], rng: random.Random) -> str:
    """A free /24 of SUBNET_POOL, as the three octets compose.yaml's AIRLOCK_SUBNET takes."""
    return str(free_network(used, rng, SUBNET_POOL, 24).network_address).rsplit(".", 1)[0]


def host_routes() -> list[ipaddress.IPv4Network]:
    """The networks this host already routes (a VPC may use 172.31.0.0/16 too)."""
    routes: list[ipaddress.IPv4Network] = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return routes
    for line in lines:
        fields = line.split()
        destination, mask = (ipaddress.IPv4Address(int(f, 16).to_bytes(4, "little")) for f in (fields[1], fields[7]))
        if int(mask):  # the default route is not a network anyone else sits on
            routes.append(ipaddress.IPv4Network(f"{destination}/{mask}", strict=False))
    return routes


def engine_subnets(client: Any) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found = []
    for network in client.networks.list():
        for config in (network.attrs.get("IPAM") or {}).get("Config") or []:
            if config.get("Subnet"):
                found.append(ipaddress.ip_network(config["Subnet"], strict=False))
    return found


def fresh_clone(target: Path) -> Path:
    """The repository's files as a clone would have them (plus uncommitted edits: they are
    what is under test), without local folders such as airlock-data or .venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            source = ROOT / name
            if source.is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)
    else:  # not a git checkout (an unpacked archive): the same, by pattern
        shutil.copytree(ROOT, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "airlock-data", "airlock-keys", "__pycache__", "*.egg-info", ".pytest_cache"))
    return target


TRUSTED_AUTHSERV_ID = "mx.lab.test"  # the mail server in front of the test lab's SMTP intake


class Lab:
    """The compose lab of one test run, in `folder` (a fresh clone), named by `run_id`."""

    def __init__(self, folder: Path, run_id: str, subnet: str, runner: Runner = subprocess.run) -> None:
        if not re.fullmatch(r"[0-9a-f]{5}", run_id):
            raise ValueError("run_id: five hex digits, so bridge names fit Linux's 15 characters")
        self.folder, self.run_id, self.runner = folder, run_id, runner
        self.project, self.tag, self.subnet = f"{PROJECT_PREFIX}{run_id}", f"test-{run_id}", subnet
        self.data = folder / "airlock-data"  # compose.yaml's default, which the host CLI's default finds
        self.key_folder = folder / "airlock-keys"
        intake_port, smtp_port, dashboard_port = free_ports(3)
        self.env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
        self.env.update(AIRLOCK_TAG=self.tag, AIRLOCK_SUBNET=subnet, AIRLOCK_BRIDGE=f"{run_id}-",
                        AIRLOCK_INTAKE_PORT=str(intake_port), AIRLOCK_SMTP_PORT=str(smtp_port),
                        AIRLOCK_DASHBOARD_PORT=str(dashboard_port), PYTHONPATH=str(folder),
                        PWD=str(folder),  # as a shell in the folder has it; compose.yaml's lab tool reads it
                        # The lab as a class runs it: behind a mail server the intake trusts to say
                        # who signed (docs/guarantees.md: what counts as an authenticated sender).
                        # The tests play that server from the host, whose connections to the
                        # published port arrive from the edge network's gateway.
                        AIRLOCK_TRUSTED_AUTHSERV_IDS=TRUSTED_AUTHSERV_ID,
                        AIRLOCK_TRUSTED_RELAYS=f"{subnet}.1",
                        # The naive agent's model that obeys the email, in process: what it does
                        # is then known (the lab's SmolLM2 as the naive agent is measured apart).
                        AIRLOCK_NAIVE_MODEL="worst-case")
        self.started = False

    @classmethod
    def fresh(cls, parent: Path, used_subnets: Iterable[Any] = (), taken_names: Iterable[str] = (),
              rng: random.Random | None = None) -> Lab:
        """A lab whose names and subnet nothing on this engine or host uses yet."""
        rng = rng or random.SystemRandom()
        taken = set(taken_names)
        run_id = secrets.token_hex(3)[:5]
        while f"{PROJECT_PREFIX}{run_id}" in taken or any(n.startswith(f"al-{run_id}-") for n in taken):
            run_id = secrets.token_hex(3)[:5]
        folder = parent / "airlock"
        folder.mkdir(parents=True)
        return cls(fresh_clone(folder), run_id, free_subnet([*used_subnets, *host_routes()], rng))

    def use_subnet(self, subnet: str) -> None:
        self.subnet = self.env["AIRLOCK_SUBNET"] = subnet

    @property
    def bridges(self) -> list[str]:
        return [f"al-{self.run_id}-{short}" for short in ("edge", "read", "model", "valid", "act", "naive", "nmod")]

    def compose(self, *args: str, files: tuple[str, ...] = (),
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Always with this run's project name: never a command on someone else's stack."""
        if args and args[0] == "up":
            self.started = True
        command = compose_command() + [arg for f in ("compose.yaml", *files) for arg in ("-f", f)]
        return self.runner([*command, "-p", self.project, *args], cwd=self.folder, env=self.env,
                           capture_output=True, text=True, timeout=timeout)

    def airlock(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The host CLI, run in the lab's folder as docs/compose.md does: no AIRLOCK_KEYS, default data dir."""
        return self.runner([sys.executable, "-m", "airlock", *args], cwd=self.folder, env=self.env,
                           capture_output=True, text=True, timeout=timeout)

    def verify(self) -> tuple[int, list[dict]]:
        done = self.airlock("verify", "--project", self.project, "--json")
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout)

    def lines(self, name: str) -> list[dict]:
        """calls.jsonl's or trace.jsonl's records, through the one decoder, each as its line
        holds it; a line a killed process left half written is skipped."""
        if name == "calls.jsonl":
            return [msgspec.to_builtins(call) for call in trace.read_calls(self.data / name)]
        return [trace.as_line(r) for r in trace.read(self.data / name) if not isinstance(r, records.Damaged)]

    def wait_healthy(self, service: str, timeout_s: float = 180) -> None:
        import docker

        client = docker.from_env(version="auto")
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                found = client.containers.list(filters={"label": [f"com.docker.compose.project={self.project}",
                                                                  f"com.docker.compose.service={service}"]})
                if found and found[0].attrs["State"].get("Health", {}).get("Status") == "healthy":
                    return
                time.sleep(1)
        finally:
            client.close()
        raise AssertionError(f"{service} did not become healthy in {timeout_s} s")

    def wait_connected(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        done = None
        while time.monotonic() < deadline:
            done = self.airlock("status", "--json", "--timeout", "1")
            counts = json.loads(done.stdout)["workers"] if done.returncode == 0 else {}
            if all(counts.get(r, 0) >= 1 for r in ("reader", "validator", "actor")):
                return
            time.sleep(0.5)
        raise AssertionError(f"the lab's workers did not connect to the broker: {done and done.stderr}")

    def remove_images(self, client: Any) -> list[str]:
        """Untag this run's images; `noprune` keeps their layers as the next build's cache.
        An image another tag also names (someone's :latest of the same build) stays."""
        removed = []
        for name in IMAGES:
            reference = f"airlock/{name}:{self.tag}"
            try:
                client.images.remove(reference, noprune=True)
                removed.append(reference)
            except docker_errors.APIError:  # never built (a failed run): nothing of ours to remove
                continue
        return removed


def run_lab(lab: Lab, client_factory: Callable[[], Any], attempts: int = 3) -> Generator[Lab, None, None]:
    """Start the lab exactly as docs/compose.md says, yield it, and take down only what it started.
    No `down` before `up`: a project of that name that exists is someone else's. Another run
    that started at the same moment may have taken the same /24 first: then take down what
    this `up` made, pick another free one, and start again."""
    try:
        up = lab.compose("up", "-d", "--build", timeout=BUILD_TIMEOUT_S)
        for _retry in range(attempts - 1):
            if up.returncode == 0 or "overlaps" not in up.stderr:
                break
            lab.compose("down", "-v", "--remove-orphans")
            client = client_factory()
            try:
                lab.use_subnet(free_subnet([*engine_subnets(client), *host_routes()], random.SystemRandom()))
            finally:
                client.close()
            up = lab.compose("up", "-d", "--build", timeout=BUILD_TIMEOUT_S)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        lab.wait_healthy("model")
        lab.wait_healthy("naive-model")
        lab.wait_connected()
        yield lab
    finally:
        if lab.started:
            lab.compose("down", "-v", "--remove-orphans")
        client = client_factory()
        try:
            lab.remove_images(client)
        finally:
            client.close()


Found = TypeVar("Found")


def wait_for(predicate: Callable[[], Found | None], timeout_s: float, what: str) -> Found:
    """Poll what a real container will make true; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def outcome(lab: Lab, message_id: str) -> dict | None:
    """The email's final outcome line in the lab's trace, or None while it has none."""
    return next((r for r in lab.lines("trace.jsonl") if r["message_id"] == message_id and r["event"] == "outcome"
                 and r.get("final", True)), None)
