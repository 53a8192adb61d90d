"""Which key may write which trace lines: a supervisor-stage line (a service restarted) comes
from the supervisor's own key only; the page's, the SMTP intake's and the CLI's are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock import keys
from airlock.settings import Settings
from airlock.wire import Notice
from broker import events
from broker.router import Router
from tests.unit.test_router import CLIENT, lines

RESTARTED = Notice(event="service_restarted", detail={"service": "reader-1", "exit_code": -9, "backoff_s": 0.5})


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> tuple[Router, dict[str, str]]:
    """A router that knows the real key folder's client keys, as the broker does; and each role's key."""
    folder = tmp_path / "keys"
    keys.generate(folder)
    roles = keys.client_roles(folder)
    router = Router(settings, approvers=keys.approvers(folder), smtp_keys=keys.smtp_keys(folder), client_roles=roles)
    return router, {role: key for key, role in roles.items()}


@pytest.mark.parametrize("role", ["dashboard", keys.SMTP_ROLE, "intake"])
def test_a_service_key_cannot_write_a_supervisor_line(keyed: tuple[Router, dict[str, str]], role: str) -> None:
    """The page's, the SMTP intake's and the CLI's keys get a violation for service_restarted, and no line."""
    router, by_role = keyed
    (line,) = lines(router.handle("intake", CLIENT, RESTARTED, 0.0, by_role[role]))
    assert (line["stage"], line["event"], line["endpoint"], line["kind"]) == ("broker", "violation", "intake", "notice")
    assert f"the {role} key" in line["reason"] and "supervisor" in line["reason"]
    assert router.counters["violation.intake"] == 1


def test_the_supervisors_key_writes_its_line(keyed: tuple[Router, dict[str, str]]) -> None:
    """The supervisor's own key writes service_restarted under the supervisor stage."""
    router, by_role = keyed
    (line,) = lines(router.handle("intake", CLIENT, RESTARTED, 0.0, by_role[keys.SUPERVISOR_ROLE]))
    assert (line["stage"], line["event"], line["service"]) == ("supervisor", "service_restarted", "reader-1")


def test_a_key_the_broker_does_not_know_writes_nothing(keyed: tuple[Router, dict[str, str]]) -> None:
    """A proven key of no known role (a person's, say) is refused: the default is deny."""
    router, _ = keyed
    (line,) = lines(router.handle("intake", CLIENT, RESTARTED, 0.0, "an-unknown-key"))
    assert line["event"] == "violation" and "an unknown key" in line["reason"]


def test_every_client_role_has_its_writes_stated() -> None:
    """The table names every client role, so a role added later is a decision, not a default."""
    assert set(events.WRITES) == set(keys.CLIENT_ROLES)
    assert [role for role, stages in events.WRITES.items() if "supervisor" in stages] == [keys.SUPERVISOR_ROLE]


def test_only_airlock_ups_broker_lets_the_supervisors_key_in(tmp_path: Path) -> None:
    """The keys folder's intake allow list holds the supervisor's key; a container's broker folder does not."""
    keys.generate(tmp_path)
    assert (tmp_path / "allow" / "intake" / "supervisor.key").is_file()
    broker = tmp_path / "services" / "broker"
    assert not list(broker.rglob("supervisor.key*"))
    assert keys.SUPERVISOR_ROLE not in keys.client_roles(broker).values()
    assert not list((tmp_path / "services").rglob("supervisor.key_secret"))
