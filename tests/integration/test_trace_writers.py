"""Which real key may write a supervisor line into a running stack's trace: the page's, the
SMTP intake's and the CLI's keys are refused with a recorded violation; the supervisor's is taken."""

from __future__ import annotations

from airlock import keys
from airlock.wire import Notice, encode
from tests.integration.conftest import wait_until

SERVICES = ("dashboard", keys.SMTP_ROLE, "intake", keys.SUPERVISOR_ROLE)


def test_only_the_supervisors_key_writes_a_supervisor_line(stack) -> None:
    """Each key sends service_restarted: one line, from the supervisor's key; a violation for each other."""
    s = stack().start()
    for service in SERVICES:
        sock = s.socket("intake", key_role=service)
        try:
            sock.send(encode(Notice(event="service_restarted", detail={"service": f"forged-by-{service}"})))
        finally:
            sock.close(linger=1000)
    refused = lambda: [v for v in s.trace(event="violation") if v.get("kind") == "notice"]  # noqa: E731
    assert wait_until(lambda: len(refused()) == 3 and any(
        r["service"].startswith("forged-by") for r in s.trace(event="service_restarted"))), s.trace()
    written = [r["service"] for r in s.trace(event="service_restarted") if r["service"].startswith("forged-by")]
    assert written == [f"forged-by-{keys.SUPERVISOR_ROLE}"]
    reasons = " | ".join(v["reason"] for v in refused())
    for service in SERVICES[:3]:
        assert f"the {service} key may not write supervisor lines" in reasons, reasons
