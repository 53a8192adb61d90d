"""python -m bench.page [--emails N] [--pages N]: what the page's snapshot costs on hostile emails.

The board is fed N emails (default 500) whose every text field is as long as the trace
allows and made of invisible tag characters (four bytes each, ten characters once escaped),
each rejected: what an attacker who sends only such emails leaves on the page. Then one
page's first event is built under tracemalloc, and N pages (default 32, the stream cap)
are opened from distinct addresses, each holding its first event as a connection does until
it is sent. Reported: the first event's bytes, /api/state's bytes, the allocation peak of
building one first event, and the resident memory with the board fed and with the pages
open. No sockets: this measures the hub and the board, as the page process holds them.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time
import tracemalloc
from pathlib import Path
from typing import Any

from dashboard.config import STREAM_BUFFER_BYTES
from dashboard.state import Board
from dashboard.stream import Hub, Refused

PLAN = [("shop", "lookup_order"), ("mail", "send_status")]
HIDDEN = "".join(chr(0xE0041 + n % 26) for n in range(4096))  # tag characters, invisible


def hostile_email(message_id: str) -> list[dict[str, Any]]:
    """One rejected email's trace lines, every text field at the length the reader and the
    broker allow (sender and subject 200, excerpt 500, answer 4,096), all invisible."""
    at = "2026-12-03T10:00:00.000000Z"
    return [
        {"at": at, "message_id": message_id, "stage": "broker", "event": "received", "origin": "smtp:" + HIDDEN[:200]},
        {"at": at, "message_id": message_id, "stage": "reader", "event": "model_answer", "answer": HIDDEN,
         "source": "model", "subject": HIDDEN[:200], "sender": HIDDEN[:200], "excerpt": HIDDEN[:500]},
        {"at": at, "message_id": message_id, "stage": "validator", "event": "verdict", "verdict": "rejected",
         "value": HIDDEN, "rule": "value.shape", "reason": HIDDEN[:2000]},
        {"at": at, "message_id": message_id, "stage": "broker", "event": "outcome", "outcome": "rejected",
         "reason": HIDDEN[:2000], "rule": "value.shape", "ended_at": "validator", "final": True},
    ]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(emails: int, pages: int, budget: int = STREAM_BUFFER_BYTES) -> dict[str, Any]:
    start_rss = rss_mib()
    hub = Hub(Board(PLAN), max_streams=pages, max_streams_per_client=1, buffer_bytes=budget)
    started = time.perf_counter()
    for n in range(emails):
        hub.publish(hostile_email(f"m-{n}"))
    fed_s = time.perf_counter() - started
    gc.collect()
    fed_rss = rss_mib()
    tracemalloc.start()
    opened = hub.subscribe("192.0.2.1")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert not isinstance(opened, Refused)
    first_bytes = len(opened[1].encode())
    hub.unsubscribe(opened[0])
    del opened
    held = [hub.subscribe(f"198.51.100.{n % 250}") for n in range(pages)]
    return {"emails": emails, "pages": pages, "budget_bytes": budget, "feed_s": round(fed_s, 2),
            "first_event_bytes": first_bytes, "state_bytes": len(hub.state()),
            "snapshot_alloc_peak_mb": round(peak / 1e6, 2), "rss_start_mib": round(start_rss, 1),
            "rss_fed_mib": round(fed_rss, 1), "rss_pages_open_mib": round(rss_mib(), 1),
            "rss_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "pages_opened": sum(not isinstance(page, Refused) for page in held)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.page", description=__doc__.split("\n\n")[0])
    parser.add_argument("--emails", type=int, default=500)
    parser.add_argument("--pages", type=int, default=32)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.emails, args.pages), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
