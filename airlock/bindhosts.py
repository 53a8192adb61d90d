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

One more form serves swarm's published ports: a host-mode port (the node's own port) is
forwarded to the container's address on docker_gwbridge, not on any overlay, and that is
the network of the container's default route. So

    AIRLOCK_INTAKE_BIND_HOST=subnet:10.231.0.0/24,default-route

binds the intake endpoint on the edge overlay (the intake and page services) and on the
address where the node's port 7401 arrives (the host CLI's `inject`), and nowhere else. A
bind host may list several hosts, comma-separated; each must resolve, or start fails.
`default-route` is the one address of ours in the subnet of the interface that carries the
one default route (/proc/net/route): no default route, or two, is a ConfigError too.

The addresses are every local IPv4 address of this network namespace, read from
/proc/net/fib_trie (Linux; a container sees its own namespace's), not the one address
gethostname() resolves to: the broker is on four networks. Tests pass the lists instead.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from airlock.errors import ConfigError, SettingsError

SUBNET_PREFIX = "subnet:"
DEFAULT_ROUTE = "default-route"
SEPARATOR = ","
WILDCARDS = ("*", "0.0.0.0", "::", "")  # every address of the host: alone only
RTF_UP, RTF_REJECT = 0x0001, 0x0200  # /proc/net/route's flags: a usable route; an unreachable one
FIB_TRIE = Path("/proc/net/fib_trie")  # the kernel's IPv4 routing tables, local addresses included
ROUTES = Path("/proc/net/route")  # the main table: interface, destination, gateway, mask (hex, little-endian)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse(text: str) -> str:
    """A bind host as written: an address or name (kept as is), subnet:CIDR, which must name
    an IPv4 network without host bits (10.231.1.5/24 is a typo, not a subnet), default-route,
    or several of these, comma-separated."""
    hosts = [host.strip() for host in text.split(SEPARATOR)]
    if len(hosts) > 1:
        if "" in hosts:
            raise ValueError(f"an empty host in a list ({text!r}): hosts are separated by single commas")
        if wildcards := [host for host in hosts if host in WILDCARDS]:
            raise ValueError(f"{wildcards[0]!r} in a list: a wildcard binds every network, the others add nothing")
        if len(set(hosts)) != len(hosts):
            raise ValueError(f"a host twice in {text!r}: the second bind would fail as if another program listened")
    return SEPARATOR.join(map(_parse_one, hosts))


def _parse_one(text: str) -> str:
    if not text.startswith(SUBNET_PREFIX):
        return text
    try:
        network = ipaddress.IPv4Network(text.removeprefix(SUBNET_PREFIX), strict=True)
    except ValueError as exc:
        raise ValueError(f"{SUBNET_PREFIX} must name an IPv4 network such as 10.231.1.0/24 ({exc})") from None
    return f"{SUBNET_PREFIX}{network}"


def hosts(bind_host: str) -> list[str]:
    """The hosts one endpoint binds on, in order: one, unless the setting lists several."""
    return bind_host.split(SEPARATOR)


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


def default_route_subnet(route_table: str) -> ipaddress.IPv4Network | None:
    """The subnet of the interface that carries the default route, from the text of
    /proc/net/route: its link route (no gateway) on that interface. None without exactly one
    usable default route (up, not `unreachable`), or without exactly one link route beside
    it. ValueError when a row is not the kernel's format."""
    rows = []
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 8:
            raise ValueError(f"a route row of {len(fields)} fields: {line!r}")
        flags = int(fields[3], 16)
        if flags & RTF_UP and not flags & RTF_REJECT:
            rows.append((fields[0], _address(fields[1]), _address(fields[2]), _address(fields[7])))
    anywhere = ipaddress.IPv4Address(0)
    defaults = [iface for iface, destination, _, mask in rows if destination == mask == anywhere]
    if len(defaults) != 1:
        return None
    links = [ipaddress.IPv4Network(f"{destination}/{mask}") for iface, destination, gateway, mask in rows
             if iface == defaults[0] and mask != anywhere and gateway == anywhere]
    return links[0] if len(links) == 1 else None


def _address(hex_text: str) -> ipaddress.IPv4Address:
    """/proc/net/route's hexadecimal address, in the host's (little-endian) byte order."""
    return ipaddress.IPv4Address(int(hex_text, 16).to_bytes(4, "little"))


def own_default_route_subnet() -> ipaddress.IPv4Network | None:
    try:
        return default_route_subnet(ROUTES.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the routes for a {DEFAULT_ROUTE} bind host: {ROUTES}: {exc.strerror} "
                          "(Linux only; write the address instead)") from None
    except ValueError as exc:
        raise ConfigError(f"cannot read the routes for a {DEFAULT_ROUTE} bind host: {ROUTES}: {exc}") from None


def resolve(bind_hosts: Mapping[str, str], addresses: Iterable[Address] | None = None,
            default_route: ipaddress.IPv4Network | Literal["read"] | None = "read") -> dict[str, str]:
    """Each endpoint's bind hosts, every subnet:CIDR and default-route replaced by the one
    address of ours in that subnet; `addresses` default: own_addresses(), `default_route`:
    own_default_route_subnet(), each read only when some host needs it."""
    if not any(_needs_lookup(host) for value in bind_hosts.values() for host in hosts(value)):
        return dict(bind_hosts)
    ours = [a for a in (own_addresses() if addresses is None else addresses)
            if isinstance(a, ipaddress.IPv4Address)]  # IPv4 subnets only
    resolved = {}
    for name, value in bind_hosts.items():
        key = f"AIRLOCK_{name.upper()}_BIND_HOST"
        found = []
        for host in hosts(value):
            if host == DEFAULT_ROUTE:
                subnet = own_default_route_subnet() if default_route == "read" else default_route
                if subnet is None:
                    raise SettingsError(f"setting {key}={value!r}: {DEFAULT_ROUTE} needs exactly one default route "
                                        f"and one link route on its interface ({ROUTES}); this host has not")
                found.append(_one_inside(key, value, subnet, ours))
            elif host.startswith(SUBNET_PREFIX):
                found.append(_one_inside(key, value, ipaddress.IPv4Network(host.removeprefix(SUBNET_PREFIX)), ours))
            else:
                found.append(host)
        resolved[name] = SEPARATOR.join(dict.fromkeys(found))  # the same address twice binds once
    return resolved


def _needs_lookup(host: str) -> bool:
    return host == DEFAULT_ROUTE or host.startswith(SUBNET_PREFIX)


def _one_inside(key: str, value: str, subnet: ipaddress.IPv4Network, ours: list[ipaddress.IPv4Address]) -> str:
    inside = [str(a) for a in ours if a in subnet]
    if len(inside) != 1:
        found = f"addresses {', '.join(inside)} are" if inside else "no address of this host is"
        raise SettingsError(f"setting {key}={value!r}: {found} in {subnet}; exactly one must be "
                            f"(this host's IPv4 addresses: {', '.join(map(str, ours)) or 'none'})")
    return inside[0]
