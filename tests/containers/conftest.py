"""The compose lab, built and started once for the container tests.

Skips with one line when no Docker engine answers; AIRLOCK_REQUIRE_DOCKER=1 (set by .ci/run)
turns that skip into a failure, so CI cannot pass without running them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock import trace
from tests.conftest import ROOT, free_ports

PROJECT = "airlocklabtest"
BUILD_TIMEOUT_S = 1800  # the model image compiles llama.cpp the first time
pytestmark = pytest.mark.containers


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


def engine_answers() -> bool:
    # Knock on the socket first: the docker SDK leaks its socket when nothing answers,
    # which pytest (warnings as errors) would report instead of the skip.
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        with socket.socket(socket.AF_UNIX) as knock:
            knock.settimeout(2)
            try:
                knock.connect(host[len("unix://"):])
            except OSError:
                return False
    try:
        import docker

        client = docker.from_env(version="1.41")
    except Exception:
        return False
    try:
        client.ping()
        return True
    except Exception:
        return False
    finally:
        client.close()


class Lab:
    def __init__(self, data: Path, key_folder: Path) -> None:
        self.data = data
        intake_port, smtp_port, dashboard_port = free_ports(3)
        self.env = {**os.environ, "AIRLOCK_DATA": str(data), "AIRLOCK_INTAKE_PORT": str(intake_port),
                    "AIRLOCK_SMTP_PORT": str(smtp_port), "AIRLOCK_DASHBOARD_PORT": str(dashboard_port),
                    "AIRLOCK_KEYS_DIR": str(key_folder), "AIRLOCK_KEYS": str(key_folder),
                    "COMPOSE_PROJECT_NAME": PROJECT, "PYTHONPATH": str(ROOT)}
        if os.getuid() != 0:  # the containers write the data folder as this user instead
            self.env.update(AIRLOCK_UID=str(os.getuid()), AIRLOCK_GID=str(os.getgid()))

    def compose(self, *args: str, files: tuple[str, ...] = (), timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = compose_command() + [arg for f in ("compose.yaml", *files) for arg in ("-f", f)]
        return subprocess.run(command + ["-p", PROJECT, *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def airlock(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "airlock", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def verify(self) -> tuple[int, list[dict]]:
        done = self.airlock("verify", "--project", PROJECT, "--json")
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout)

    def lines(self, name: str) -> list[dict]:
        return list(trace.read(self.data / name))  # skips a line a killed process left half written

    def wait_healthy(self, service: str, timeout_s: float = 180) -> None:
        import docker

        client = docker.from_env(version="auto")
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                found = client.containers.list(filters={"label": [f"com.docker.compose.project={PROJECT}",
                                                                  f"com.docker.compose.service={service}"]})
                if found and found[0].attrs["State"].get("Health", {}).get("Status") == "healthy":
                    return
                time.sleep(1)
        finally:
            client.close()
        raise AssertionError(f"{service} did not become healthy in {timeout_s} s")

    def wait_connected(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done = self.airlock("status", "--timeout", "1")
            counts = dict(re.findall(r"'(\w+)': (\d+)", done.stdout))
            if done.returncode == 0 and all(int(counts.get(r, 0)) >= 1 for r in ("reader", "validator", "actor")):
                return
            time.sleep(0.5)
        raise AssertionError("the lab's workers did not connect to the broker")


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not engine_answers():
        message = "no Docker engine answers: container tests skipped (.ci/run starts one and makes them mandatory)"
        if os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1":
            pytest.fail(message.replace("skipped", "REQUIRED but"))
        pytest.skip(message)
    data = tmp_path_factory.mktemp("lab") / "airlock-data"
    data.mkdir()
    key_folder = data.parent / "airlock-keys"
    key_folder.mkdir()
    if os.getuid() == 0:  # the containers run as uid 10001: let them write data and keys
        for path in (data, key_folder):
            os.chown(path, 10001, 10001)
    running = Lab(data, key_folder)
    running.compose("down", "-v", "--remove-orphans")
    # The tools are in a profile that `up --build` skips: build them so they run this code.
    built = running.compose("build", "keys", "inject", timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    made = running.compose("run", "--rm", "keys")  # the documented way to make the lab's keys
    assert made.returncode == 0 and (key_folder / "services" / "reader" / "reader.key_secret").exists(), made.stderr
    up = running.compose("up", "-d", "--build", timeout=BUILD_TIMEOUT_S)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    try:
        running.wait_healthy("model")
        running.wait_connected()
        yield running
    finally:
        running.compose("down", "-v", "--remove-orphans")
