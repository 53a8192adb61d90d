"""Where the broker binds an endpoint when no one can know its address in advance.

Compose gives the broker a static address on each role's network and binds each endpoint
on that address (AIRLOCK_<ROLE>_BIND_HOST=172.31.240.18). Swarm has no static addresses,
but a stack can pin each overlay network's subnet. So a bind host may also be written

    AIRLOCK_READER_BIND_HOST=subnet:10.231.1.0/24

"my own IPv4 address inside that subnet", found once when the broker starts. Exactly one of
this process's addresses must be in it: none (the container is not on that network) or
several (an address the endpoint should not be reachable on may be among them) is a
ConfigError naming the setting, before any port opens. Binding on "the first one found"
would be a guess, and a wrong guess opens an endpoint to another role's network.

The addresses are every local IPv4 address of this network namespace, read from
/proc/net/fib_trie (Linux; a container sees its own namespace's), not the one address
gethostname() resolves to: the broker is on four networks. Tests pass the list instead.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

from airlock.errors import ConfigError, SettingsError

SUBNET_PREFIX = "subnet:"
FIB_TRIE = Path("/proc/net/fib_trie")  # the kernel's IPv4 routing tables, local addresses included

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse(text: str) -> str:
    """A bind host as written: an address or name (kept as is), or subnet:CIDR, which must
    name an IPv4 network without host bits (10.231.1.5/24 is a typo, not a subnet)."""
    if not text.startswith(SUBNET_PREFIX):
        return text
    try:
        network = ipaddress.IPv4Network(text.removeprefix(SUBNET_PREFIX), strict=True)
    except ValueError as exc:
        raise ValueError(f"{SUBNET_PREFIX} must name an IPv4 network such as 10.231.1.0/24 ({exc})") from None
    return f"{SUBNET_PREFIX}{network}"


def local_ipv4_addresses(fib_trie: str) -> list[ipaddress.IPv4Address]:
    """This namespace's own IPv4 addresses from the text of /proc/net/fib_trie: each
    `|-- A.B.C.D` leaf followed by a `/32 host LOCAL` route (a leaf may carry several
    routes; `/8 host LOCAL` is loopback's whole range, `link BROADCAST` a broadcast address).
    The Main and Local tables both list them: each address once, in order found."""
    found: list[ipaddress.IPv4Address] = []
    leaf: str | None = None
    for line in fib_trie.splitlines():
        words = line.split()
        if words[:1] == ["|--"] and len(words) == 2:
            leaf = words[1]
        elif leaf is not None and words == ["/32", "host", "LOCAL"]:
            address = ipaddress.IPv4Address(leaf)
            if address not in found:
                found.append(address)
    return found


def own_addresses() -> list[ipaddress.IPv4Address]:
    """Every IPv4 address of this process's network namespace (Linux only)."""
    try:
        return local_ipv4_addresses(FIB_TRIE.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot list this host's addresses for a {SUBNET_PREFIX} bind host: "
                          f"{FIB_TRIE}: {exc.strerror} (Linux only; write the address instead)") from None


def resolve(bind_hosts: Mapping[str, str], addresses: Iterable[Address] | None = None) -> dict[str, str]:
    """Each endpoint's bind host, every subnet:CIDR replaced by the one address of ours in
    it; `addresses` default: own_addresses(), read only when some host needs it."""
    wanted = {name: host for name, host in bind_hosts.items() if host.startswith(SUBNET_PREFIX)}
    if not wanted:
        return dict(bind_hosts)
    ours = [a for a in (own_addresses() if addresses is None else addresses) if a.version == 4]  # IPv4 subnets only
    resolved = dict(bind_hosts)
    for name, host in wanted.items():
        subnet = ipaddress.IPv4Network(host.removeprefix(SUBNET_PREFIX))
        inside = [str(a) for a in ours if a in subnet]
        key = f"AIRLOCK_{name.upper()}_BIND_HOST"
        if len(inside) != 1:
            found = f"addresses {', '.join(inside)} are" if inside else "no address of this host is"
            raise SettingsError(f"setting {key}={host!r}: {found} in {subnet}; exactly one must be "
                                f"(this host's IPv4 addresses: {', '.join(map(str, ours)) or 'none'})")
        resolved[name] = inside[0]
    return resolved

