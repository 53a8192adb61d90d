"""Restart time against the size of the trace: how long a broker's recovery takes after a
history of several GB, with the trace in one file (as before segments) or in segments with
a checkpoint (airlock.tracefiles).

    python -m bench.trace_restart generate DIR GB [--segment-bytes N]
    python -m bench.trace_restart recover DIR
    python -m bench.trace_restart serve DIR

`generate` writes GB of realistic trace (six lines, about 2.6 KB an email, shaped like
a real run's: received, model_answer, verdict, a step run and a step refused, outcome)
into DIR/trace.jsonl: with --segment-bytes through the broker's writer, turn by turn,
taking a checkpoint at each rotation as the broker does (the time of each is reported);
without, as one file. The last 100 emails are left open, escalated or journalled.
`recover` times what a restarted broker does before it serves: broker.recovery.recover over
DIR's trace and journal, and prints the seconds, files read and peak memory as JSON.
`serve` starts a real broker (`python -m broker --insecure`, free loopback ports) on DIR
and times how long it takes to answer a status request, then stops it: the restart time a
user sees (the broker writes to DIR's trace, as any restart does). Run `recover` or `serve`
with an older checkout on PYTHONPATH for the figures before segments.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from airlock import records, settings as settings_module, trace
from airlock.client import IntakeClient
from airlock.errors import BrokerUnreachable
from airlock.interpreter import python_command
from broker import housekeeping, recovery
from broker.journal import Journal, QueuedEmail
from broker.router import Router

TURN_EMAILS = 200  # emails a broker turn: a turn's lines are flushed, and rotated, together
LIVE_TAIL = 100  # the last emails: not final, so recovery has real work
PLACEHOLDER = "msg-000000000000"


def _email_lines() -> bytes:
    """One email's six lines, its id a placeholder to replace."""
    m = PLACEHOLDER
    decision: dict[str, Any] = {
        "verdict": "allow", "reason": "", "refused_by": None, "escalated_to": None, "approver": None,
        "rules": [{"rule": name, "verdict": "allow", "reason": "", "read": {}}
                  for name in ("plan", "pin", "corroboration", "approval", "rate")]}
    at, plan = records.utc_now(), [("shop", "lookup_order"), ("mail", "send_status")]
    return b"".join(map(records.encode, [
        records.Received(at, m, "broker", origin="smtp:customer-880088@example.org", format="eml", bytes=753,
                         sender="customer-880088@example.org", sender_proof="none"),
        records.ModelAnswer(at, m, "reader", layer="model_output", answer="7788", answer_chars=4, source="model",
                            truncated=False, sender="customer-880088@example.org", subject="Rechnung",
                            excerpt="Bestellung 7788, Rechnung anbei. " * 6, body_chars=34, prompt_cut=False,
                            attachments=["rechnung.csv"], defects=[], digest="7336" * 16),
        records.Verdict(at, m, "validator", layer="validator", verdict="passed", value="7788"),
        records.Step(at=at, message_id=m, stage="actor", step=1, server="shop", tool="lookup_order", key=f"{m}:1",
                     decision=decision, status="ok", args={"order_id": "7788"}, task="order_status_guarded", plan=plan,
                     result={"order_id": "7788", "found": True, "customer": "petra@example.at", "status": "delivered"}),
        records.Step(at=at, message_id=m, stage="actor", step=2, server="mail", tool="send_status", key=f"{m}:2",
                     decision=decision),
        records.OutcomeLine(at, m, "broker", outcome="completed", ended_at="actor", final=True, ms=13.1, reason=""),
    ]))


def _settings(folder: Path) -> settings_module.Settings:
    return settings_module.load({"AIRLOCK_DATA_DIR": str(folder)})


def generate(folder: Path, gigabytes: float, segment_bytes: int) -> dict[str, object]:
    settings = _settings(folder)
    template = _email_lines()
    without_outcome = template[:template.rindex(b'{"event"')]  # every line but the last, its outcome
    count = int(gigabytes * 1e9 / len(template))
    journal = Journal(folder / "journal.bin")
    writer = trace.TraceWriter(settings.trace_path, segment_bytes)
    checkpoints: list[float] = []
    started = time.monotonic()
    for first in range(0, count, TURN_EMAILS):
        chunk = []
        for n in range(first, min(count, first + TURN_EMAILS)):
            message_id = f"msg-{n:012d}".encode()
            live = n >= count - LIVE_TAIL
            if live and n % 2:
                journal.append(QueuedEmail(message_id.decode(), b"Bestellung 7788", "text"))
            chunk.append((without_outcome if live else template).replace(PLACEHOLDER.encode(), message_id))
        writer.write(b"".join(chunk))
        writer.flush()
        if writer.rotated:
            journal.sync()
            begun = time.monotonic()
            housekeeping.checkpoint(settings, writer, journal)
            checkpoints.append(time.monotonic() - begun)
    writer.close()
    journal.close()
    return {"emails": count, "bytes_per_email": len(template), "seconds": round(time.monotonic() - started, 1),
            "checkpoints": len(checkpoints),
            "checkpoint_s_max": round(max(checkpoints, default=0.0), 3),
            "checkpoint_s_mean": round(sum(checkpoints) / len(checkpoints), 3) if checkpoints else 0.0}


def recover(folder: Path) -> dict[str, object]:
    settings = _settings(folder)
    trace_bytes = sum(p.stat().st_size for p in folder.glob("trace*.jsonl"))
    started = time.monotonic()
    journal = Journal(folder / "journal.bin")
    router = Router(settings)
    effects, _backlog = recovery.recover(router, settings, journal, time.monotonic())
    seconds = time.monotonic() - started
    journal.close()
    peak_rss_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # ru_maxrss is in KiB
    return {"trace_bytes": trace_bytes, "seconds": round(seconds, 3), "in_flight": len(router.flights),
            "effects": len(effects), "peak_rss_mib": peak_rss_mib}


def serve(folder: Path) -> dict[str, object]:
    ports = {}
    for name in settings_module.DEFAULT_PORTS:
        with socket.socket() as probe:  # a free port now; the broker binds it a moment later
            probe.bind(("127.0.0.1", 0))
            ports[f"AIRLOCK_{name.upper()}_PORT"] = str(probe.getsockname()[1])
    env = {**os.environ, "AIRLOCK_DATA_DIR": str(folder), **ports}
    settings = settings_module.load(env)
    started = time.monotonic()
    broker = subprocess.Popen(python_command("-m", "broker", "--insecure"), env=env)
    try:
        with IntakeClient(settings, timeout_s=1.0) as client:
            while True:
                try:
                    client.status()
                    break
                except BrokerUnreachable:
                    if broker.poll() is not None:
                        raise SystemExit(f"the broker exited {broker.returncode}") from None
        seconds = time.monotonic() - started
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(60)
    return {"trace_bytes": sum(p.stat().st_size for p in folder.glob("trace*.jsonl")),
            "seconds_to_answer": round(seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_restart", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("generate")
    make.add_argument("folder", type=Path)
    make.add_argument("gigabytes", type=float)
    make.add_argument("--segment-bytes", type=int, default=0, help="0: one file, as before segments")
    for name in ("recover", "serve"):
        commands.add_parser(name).add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "generate":
        result = generate(args.folder, args.gigabytes, args.segment_bytes)
    elif args.command == "recover":
        result = recover(args.folder)
    else:
        result = serve(args.folder)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
