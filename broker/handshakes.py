"""Peers refused at the CURVE handshake, which never send a frame: what each failure was.

Data: the socket monitor's handshake events on each endpoint (zmq), and whether the broker
itself was just stopped (broker.stall).
Readers: the trace (`auth_refused`, `handshake_failed`) and the counters a Status shows.
Rationale: a key the authenticator denied, or a peer that failed CURVE (no CURVE, bad
crypto), is `auth_refused`; so is a handshake that ended with no verdict (errno only), as
a peer without CURVE often does by hanging up on the broker's greeting. But one that ended
so while the broker itself was stopped, or just after (SIGSTOP, a paused container), is
the stop's doing: the stack's own services gave up waiting and reconnected. That is
`handshake_failed`, with its errno and the stop's length, counted apart.
"""

from __future__ import annotations

import errno
import os
import time
from collections import Counter

import zmq
from zmq.utils.monitor import recv_monitor_message

from airlock import records
from airlock.records import AuthRefused, HandshakeFailed, utc_now
from broker.stall import StallWatch

FAILURES = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)  # the events each endpoint's monitor reports
_EVENT_NAMES: dict[int, str] = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "key not allowed on this endpoint",
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake protocol error (e.g. a peer without CURVE)",
                zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed"}


def failures(counters: Counter[str], monitor: zmq.Socket, role: str, watch: StallWatch) -> list[bytes]:
    """Trace each failed handshake waiting on `monitor` (the `role` endpoint's) as what it was."""
    lines: list[bytes] = []
    while True:
        try:
            event = recv_monitor_message(monitor, zmq.NOBLOCK)
        except zmq.Again:
            return lines
        peer = event["endpoint"].decode(errors="replace")
        stalled_s = watch.stalled(time.monotonic())
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and stalled_s:
            value = event["value"]
            counters[f"handshake_failed.{role}"] += 1
            lines.append(records.encode(HandshakeFailed(
                utc_now(), None, "broker", endpoint=role, peer=peer, errno=errno.errorcode.get(value, str(value)),
                stalled_s=round(stalled_s, 1),
                reason=f"the handshake ended with no verdict ({os.strerror(value)}) as the broker was stopped "
                       f"for {stalled_s:.0f} s: its peers gave up waiting; not a refusal")))
            continue
        counters[f"auth_refused.{role}"] += 1
        lines.append(records.encode(AuthRefused(utc_now(), None, "broker", endpoint=role,
                                                reason=_EVENT_NAMES.get(event["event"], str(event["event"])),
                                                peer=peer)))
