"""How long a trace rotation keeps a running broker from answering.

    python -m bench.rotation_stall DIR [--segment-mib 64] [--code PATH]

Fills DIR/trace.jsonl with realistic lines (bench.trace_restart's six lines an email)
to just under the segment size, starts a real broker on DIR (`python -m broker --insecure`,
free loopback ports; `--code PATH` puts another checkout first on its PYTHONPATH, for the
figures of older code), and then, while one client asks for the status over and over and
times each answer, another submits emails until the live file is closed into a segment
and the checkpoint covers it. Prints JSON: the slowest status answer while the segment was
rotated and folded (the stall a worker or a client sees), the slowest and the median
before it, and how long the fold took from the rotation to the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import zmq

from airlock import settings as settings_module, tracefiles
from airlock.interpreter import python_command
from airlock.transport import dealer
from airlock.wire import Ping, Submit, encode, outbound_decoder
from bench.trace_restart import PLACEHOLDER, _email_lines

MARGIN_BYTES = 16 * 1024  # room left in the live file: a few dozen emails' received lines
PING_EVERY_S = 0.002
SETTLE_S = 1.0  # status answers timed after the checkpoint, for the figure after


def _fill(path: Path, size: int) -> int:
    """Whole emails' lines up to `size` bytes; their count."""
    template = _email_lines()
    count = size // len(template)
    with open(path, "wb") as out:
        out.writelines(template.replace(PLACEHOLDER.encode(), f"msg-{n:012d}".encode()) for n in range(count))
    return count


class Pinger(threading.Thread):
    """Asks for the status again as soon as each answer comes; keeps (sent at, seconds)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        self.endpoint = endpoint
        self.times: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        sock = dealer(zmq.Context.instance(), self.endpoint, 4 * 1024 * 1024)
        ref = 0
        try:
            while not self.done.is_set():
                ref += 1
                sent = time.monotonic()
                sock.send(encode(Ping(ref=ref)))
                if not sock.poll(60_000):
                    raise SystemExit("no status answer in 60 s")
                sock.recv()
                self.times.append((sent, time.monotonic() - sent))
                time.sleep(PING_EVERY_S)
        finally:
            sock.close(linger=0)


def run(folder: Path, segment_bytes: int, code: Path | None) -> dict[str, object]:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    emails = _fill(folder / "trace.jsonl", segment_bytes - MARGIN_BYTES)
    ports = {}
    for name in settings_module.DEFAULT_PORTS:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports[f"AIRLOCK_{name.upper()}_PORT"] = str(probe.getsockname()[1])
    env = {**os.environ, "AIRLOCK_DATA_DIR": str(folder), "AIRLOCK_TRACE_SEGMENT_BYTES": str(segment_bytes), **ports}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
    settings = settings_module.load(env)
    broker = subprocess.Popen(python_command("-m", "broker", "--insecure"), env=env, stderr=subprocess.DEVNULL)
    endpoint = f"tcp://127.0.0.1:{settings.ports['intake']}"
    intake = dealer(zmq.Context.instance(), endpoint, 4 * 1024 * 1024)
    decode = outbound_decoder("intake")
    pinger = Pinger(endpoint)
    try:
        intake.send(encode(Ping(ref=0)))
        if not intake.poll(60_000):
            raise SystemExit("the broker did not answer")
        intake.recv()
        pinger.start()
        time.sleep(0.5)  # answers before the rotation, for the figure before
        rotated_at = folded_at = 0.0
        ref = 0
        while not folded_at:
            if not rotated_at:
                ref += 1
                intake.send(encode(Submit(ref=ref, raw=b"Subject: order 7788\n\nwhere is order 7788?", format="text")))
                if intake.poll(60_000):
                    decode.frame(intake.recv())
                if tracefiles.closed(settings.trace_path):
                    rotated_at = time.monotonic()
            elif tracefiles.load_through(settings.trace_path) >= 1:
                folded_at = time.monotonic()
            else:
                time.sleep(0.001)
        time.sleep(SETTLE_S)
        pinger.done.set()
        pinger.join(120)
    finally:
        intake.close(linger=0)
        broker.send_signal(signal.SIGTERM)
        broker.wait(120)
    before = [seconds for sent, seconds in pinger.times if sent + seconds < rotated_at - 0.05]
    during = [seconds for sent, seconds in pinger.times if sent + seconds >= rotated_at - 0.05]
    return {"segment_bytes": segment_bytes, "emails_in_segment": emails, "code": str(code or "this checkout"),
            "status_answers": len(pinger.times),
            "stall_s_max_during_rotation": round(max(during, default=0.0), 3),
            "answer_s_max_before": round(max(before, default=0.0), 4),
            "answer_s_median_before": round(statistics.median(before), 4) if before else None,
            "rotation_to_checkpoint_s": round(folded_at - rotated_at, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rotation_stall", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--segment-mib", type=float, default=64.0)
    parser.add_argument("--code", type=Path, help="another checkout, for the broker's code (figures before)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.folder, int(args.segment_mib * 1024 * 1024), args.code)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
