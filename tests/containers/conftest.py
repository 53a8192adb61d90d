"""The compose lab, built and started once for the container tests: this run's own project
(see lab.py), started as docs/compose.md says and taken down without touching anyone else's.

Skips with one line when no Docker engine answers; AIRLOCK_REQUIRE_DOCKER=1 (set by .ci/run)
turns that skip into a failure, so CI cannot pass without running them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers.lab import Lab, engine_subnets, run_lab


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
    except Exception:  # noqa: BLE001  no usable SDK or socket: no engine
        return False
    try:
        client.ping()
        return True
    except Exception:  # noqa: BLE001  the SDK raises its own and requests' errors: no engine
        return False
    finally:
        client.close()


def taken_names(client) -> set[str]:
    """Compose projects on this engine and network interfaces on this host: names a new lab must not reuse."""
    projects = {c.labels.get("com.docker.compose.project", "") for c in client.containers.list(all=True)}
    projects |= {(n.attrs.get("Labels") or {}).get("com.docker.compose.project", "") for n in client.networks.list()}
    interfaces = set(os.listdir("/sys/class/net")) if Path("/sys/class/net").is_dir() else set()
    return (projects | interfaces) - {""}


def fresh_lab(parent: Path) -> Lab:
    """A lab whose project name, subnet and bridges nothing on this engine or host uses yet."""
    import docker

    client = docker.from_env(version="auto")
    try:
        return Lab.fresh(parent, engine_subnets(client), taken_names(client))
    finally:
        client.close()


def require_engine() -> None:
    """Skip with one line when no engine answers; fail instead under AIRLOCK_REQUIRE_DOCKER=1."""
    if not engine_answers():
        message = "no Docker engine answers: container tests skipped (.ci/run starts one and makes them mandatory)"
        if os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1":
            pytest.fail(message.replace("skipped", "REQUIRED but"))
        pytest.skip(message)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_engine()
    import docker

    yield from run_lab(fresh_lab(tmp_path_factory.mktemp("lab")), lambda: docker.from_env(version="auto"))
