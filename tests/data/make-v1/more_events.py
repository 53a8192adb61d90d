"""Drive the previous version's broker in process for the trace events a small run does not
write (run with PYTHONPATH at that version). Prints the lines to stdout."""
import collections
import errno
import tempfile
from pathlib import Path

from airlock import settings as settings_module
from airlock.wire import (
    Await,
    Decide,
    Event,
    Hello,
    Malformed,
    Notice,
    Passed,
    Reading,
    Rejected,
    Submit,
    Unreadable,
    Violation,
)
from broker.router import Router, Send
from broker.storage import Storage
from tests.conftest import airlock_env

out: list[bytes] = []
def keep(effects):
    out.extend(e for e in effects if isinstance(e, bytes))

with tempfile.TemporaryDirectory() as tmp:
    s = settings_module.load({**airlock_env(Path(tmp) / "data"), "AIRLOCK_MAX_ATTEMPTS": "2"})
    r = Router(s, boot=0xABC, approvers={"KEYDANA": "dana"})
    for role, who in (("reader", b"r1"), ("validator", b"v"), ("actor", b"a")):
        keep(r.handle(role, who, Hello(credit=4), 0.0))
    def submit(raw, ref, key=""):
        effects = r.handle("intake", b"c", Submit(ref=ref, raw=raw, format="text", sender="x@example.org",
                                                  sender_proof="dkim" if key == "" else "none"), 0.0, key)
        keep(effects)
        return next(e.message.message_id for e in effects if isinstance(e, Send) and hasattr(e.message, "message_id"))
    m1 = submit(b"Order 4411", 1)           # with a sender_proof claimed by a non-SMTP key: violation
    keep(r.handle("reader", b"r1", Unreadable(message_id=m1, rule="mail.empty", reason="no body",
                                               notes={"subject": "hi\u202e"}), 0.1))
    m2 = submit(b"Order 7788", 2)
    keep(r.handle("reader", b"r1", Event(event="model_retry", message_id=m2, detail={"try": 2, "why": "timeout"}), 0.1))
    keep(r.handle("reader", b"r1", Reading(message_id=m2, answer="x", source="none",
                                           notes={"model_error": "not_configured: none"}), 0.2))
    keep(r.handle("validator", b"v", Rejected(message_id=m2, rule="digits.pattern", reason="'x' is not digits"), 0.3))
    keep(r.handle("reader", b"r1", Reading(message_id=m2, answer="late", source="model"), 0.35))  # late_result
    m3 = submit(b"Order 5512", 3)
    keep(r.tick(100.0))  # the reader holds m3 past its deadline: redelivery
    keep(r.tick(200.0))  # again: gave up, failed; the silent workers are lost
    keep(r.handle("reader", b"r9", Malformed(reason="not msgpack", size=7), 201.0))
    keep(r.handle("validator", b"v", Violation(kind="submit", reason="a validator may not submit"), 201.0))
    keep(r.handle("intake", b"c", Notice(event="service_restarted", detail={"service": "reader-1", "exit_code": -9}),
                  201.0))
    keep(r.handle("intake", b"c", Decide(ref=9, message_id="abc-77", approve=True, role="support-lead", by="dana"),
                  201.0, "KEYMALLORY"))
    keep(r.undeliverable(Send("intake", b"gone", Await(ref=1, ids=["abc-1"])), 202.0))
    keep(r.handle("validator", b"v", Passed(message_id="abc-404", value="1", student="validator.check"), 202.0))
    storage = Storage(collections.Counter())
    keep(storage.failed("trace", OSError(errno.ENOSPC, "No space left on device"), 203.0))
    keep(storage.recovered("trace", 204.0, lines_dropped=0))
print("".join(line.decode() for line in out), end="")
