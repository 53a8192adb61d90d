"""Free loopback ports for a private stack (the harness's) and for the tests' own processes."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """Distinct ports the kernel just handed out on loopback (bound together, then freed)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()
