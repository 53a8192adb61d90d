"""What Docker restarts in the compose lab, and what the broker does about what it does not
(docs/compose.md, what restarts).

A service whose process dies by itself (here: SIGKILL to its pid from the host, as the
kernel's OOM killer would) is restarted by `restart: unless-stopped`. One stopped through
Docker's API (`docker kill`) is never restarted, by any policy: its emails then show in
`airlock status` and end `failed` after AIRLOCK_NO_WORKER_WAIT_S.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from tests.containers.lab import outcome, wait_for

if TYPE_CHECKING:
    import docker

SEED = "samples/seed_4411_de.eml"
SHORT_WAIT_S = "15"  # the broker's AIRLOCK_NO_WORKER_WAIT_S while the actor is killed



@contextmanager
def engine() -> Iterator[docker.DockerClient]:
    import docker

    client = docker.from_env(version="auto")
    try:
        yield client
    finally:
        client.close()


def state(lab, service: str) -> dict:
    """The service's container's State and RestartCount, as `docker inspect` shows them."""
    with engine() as client:
        (container,) = client.containers.list(all=True, filters={"label": [
            f"com.docker.compose.project={lab.project}", f"com.docker.compose.service={service}"]})
        container.reload()
        return {**container.attrs["State"], "RestartCount": container.attrs["RestartCount"]}


def status(lab) -> dict:
    done = lab.airlock("status", "--json", "--timeout", "2")
    return json.loads(done.stdout) if done.returncode == 0 else {}


@pytest.mark.skipif(os.geteuid() != 0, reason="kills a process of the services' user from the host: needs root")
def test_a_service_whose_process_dies_is_restarted(lab) -> None:
    """SIGKILL to the actor's own pid (not through Docker): `unless-stopped` starts it again,
    it reconnects, and mail completes."""
    before = state(lab, "actor")
    os.kill(before["Pid"], signal.SIGKILL)
    wait_for(lambda: state(lab, "actor")["RestartCount"] > before["RestartCount"]
             and state(lab, "actor")["Running"], 120, "the actor restarted")
    lab.wait_connected()
    done = lab.airlock("inject", "--json", "--wait", "--wait-timeout", "120", SEED, timeout=180)
    assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "completed", done.stdout + done.stderr


def test_a_docker_killed_actor_stays_down_and_its_emails_end_failed(lab) -> None:
    """`docker kill` (compose kill): Docker does not restart it, whatever the policy. Its
    emails show in `airlock status` as waiting with no actor, then end `failed` naming the
    actor and AIRLOCK_NO_WORKER_WAIT_S, with no call run."""
    lab.env["AIRLOCK_NO_WORKER_WAIT_S"] = SHORT_WAIT_S
    try:
        recreated = lab.compose("up", "-d", "--no-deps", "broker")
        assert recreated.returncode == 0, recreated.stderr
        lab.wait_connected(timeout_s=120)
        before = state(lab, "actor")
        killed = lab.compose("kill", "actor")
        assert killed.returncode == 0, killed.stderr
        after = wait_for(lambda: s if (s := state(lab, "actor"))["Status"] != "running" else None, 60,
                         "the actor stopped")
        # Docker decides when the process exits: "restarting" had a policy applied, "exited" none.
        assert after["Status"] == "exited" and after["RestartCount"] == before["RestartCount"], after
        wait_for(lambda: status(lab).get("workers", {}).get("actor") == 0, 60, "the broker saw the actor go")
        done = lab.airlock("inject", "--json", SEED)
        assert done.returncode == 0, done.stderr
        message_id = json.loads(done.stdout)["id"]
        shown = wait_for(lambda: status(lab).get("waiting", {}).get("actor"), 180, "status shows the email stuck")
        assert shown["no_worker"] == 1 and shown["limit_s"] == float(SHORT_WAIT_S), shown
        ended = wait_for(lambda: outcome(lab, message_id), 120, "the stuck email's outcome")
        assert ended["outcome"] == "failed" and ended["ended_at"] == "actor", ended
        assert "no actor was connected" in ended["reason"] and "AIRLOCK_NO_WORKER_WAIT_S" in ended["reason"], ended
        assert [c for c in lab.lines("calls.jsonl") if c["message_id"] == message_id] == []
        assert state(lab, "actor")["Status"] == "exited"  # still down: nothing restarted it meanwhile
    finally:
        del lab.env["AIRLOCK_NO_WORKER_WAIT_S"]
        restored = lab.compose("up", "-d", "--no-deps", "broker", "actor")
        assert restored.returncode == 0, restored.stderr
        lab.wait_connected(timeout_s=120)
