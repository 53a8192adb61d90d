"""A `subnet:CIDR` bind host (airlock/bindhosts.py): the broker's own address in a pinned
subnet, as on a swarm, where no address is static. The addresses are passed in: no socket,
no /proc read."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from airlock import bindhosts, settings as settings_module
from airlock.errors import ConfigError, SettingsError

READERS = "subnet:10.231.1.0/24"

# What /proc/net/fib_trie reads like in a container on two networks (trimmed): loopback's
# /8 route and the broadcast addresses are not addresses of ours; each address is listed in
# both tables.
FIB_TRIE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 10.231.1.0/24 2 0 2
        +-- 10.231.1.0/28 2 0 2
           |-- 10.231.1.0
              /24 link UNICAST
           |-- 10.231.1.7
              /32 host LOCAL
        |-- 10.231.1.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
     |-- 10.231.3.12
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
           |-- 10.231.1.7
              /32 host LOCAL
"""


def addresses(*texts: str) -> list[IPv4Address | IPv6Address]:
    return [ip_address(text) for text in texts]


def test_a_subnet_bind_host_becomes_our_one_address_in_it() -> None:
    """One address of ours in the subnet: the endpoint binds there; other hosts are kept."""
    hosts = {"reader": READERS, "actor": "10.231.4.2", "trace": "127.0.0.1"}
    resolved = bindhosts.resolve(hosts, addresses("127.0.0.1", "10.231.1.7", "10.231.3.12"))
    assert resolved == {"reader": "10.231.1.7", "actor": "10.231.4.2", "trace": "127.0.0.1"}


@pytest.mark.parametrize(("ours", "said"), [
    pytest.param(("127.0.0.1", "10.231.3.12"), "no address of this host is in", id="none-inside"),
    pytest.param(("10.231.1.7", "10.231.1.9"), "addresses 10.231.1.7, 10.231.1.9 are in", id="two-inside"),
    pytest.param((), "no address of this host is in", id="no-addresses"),
])
def test_none_or_several_addresses_in_the_subnet_fail_naming_the_setting(ours: tuple[str, ...], said: str) -> None:
    """Not exactly one address in the subnet is a SettingsError (a ConfigError: exit 78) that
    names the setting and what was found: never a guess between two networks."""
    with pytest.raises(SettingsError, match=r"AIRLOCK_READER_BIND_HOST='subnet:10\.231\.1\.0/24'") as caught:
        bindhosts.resolve({"reader": READERS}, addresses(*ours))
    assert isinstance(caught.value, ConfigError)
    assert said in str(caught.value)


def test_ipv6_addresses_are_ignored() -> None:
    """An IPv6 address never answers an IPv4 subnet, and does not count as a second one."""
    ours = addresses("fe80::1", "::ffff:10.231.1.8", "10.231.1.7")
    assert bindhosts.resolve({"reader": READERS}, ours) == {"reader": "10.231.1.7"}


def test_without_a_subnet_bind_host_no_address_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain bind hosts (compose, `airlock up`) never look at this host's addresses."""
    monkeypatch.setattr(bindhosts, "own_addresses", lambda: pytest.fail("addresses read"))
    assert bindhosts.resolve({"reader": "172.31.240.18"}) == {"reader": "172.31.240.18"}


def test_the_addresses_come_from_every_local_route_of_fib_trie() -> None:
    """Our addresses in /proc/net/fib_trie are the /32 host LOCAL leaves, each once; the
    loopback range and broadcast addresses are not among them."""
    assert bindhosts.local_ipv4_addresses(FIB_TRIE) == addresses("10.231.1.7", "127.0.0.1", "10.231.3.12")


@pytest.mark.parametrize("text", ["subnet:10.231.1.5/24", "subnet:fd00::/64", "subnet:readers", "subnet:"])
def test_a_bad_subnet_fails_at_load_naming_the_key(text: str) -> None:
    """A subnet that is not an IPv4 network without host bits is refused when settings load,
    naming the key, in every process (not only when the broker binds)."""
    with pytest.raises(SettingsError, match="AIRLOCK_READER_BIND_HOST"):
        settings_module.load({"AIRLOCK_READER_BIND_HOST": text})


def test_settings_resolve_their_bind_hosts_and_the_endpoint_names_the_address() -> None:
    """Settings keep `subnet:` as written; the resolved copy binds on the address found."""
    loaded = settings_module.load({"AIRLOCK_READER_BIND_HOST": READERS, "AIRLOCK_READER_PORT": "7402"})
    assert loaded.bind_hosts["reader"] == READERS
    resolved = loaded.with_bind_hosts_resolved(addresses("10.231.1.7"))
    assert resolved.endpoint("reader", bind=True) == "tcp://10.231.1.7:7402"
    assert resolved.bind_hosts["intake"] == loaded.bind_hosts["intake"] == "127.0.0.1"
