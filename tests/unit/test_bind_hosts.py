"""A `subnet:CIDR` bind host (airlock/bindhosts.py): the broker's own address in a pinned
subnet, as on a swarm, where no address is static. The addresses are passed in: no socket,
no /proc read."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_address
from pathlib import Path

import msgspec
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
    assert resolved.bind_endpoints("reader") == ["tcp://10.231.1.7:7402"]
    assert resolved.bind_hosts["intake"] == loaded.bind_hosts["intake"] == "127.0.0.1"


# /proc/net/route in a swarm task on the edge overlay (eth0) and docker_gwbridge (eth4), which
# carries the default route: the node's host-mode ports arrive at eth4's address.
ROUTES = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth4\t00000000\t010012AC\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000E70A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth2\t0001E70A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth4\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
"""
GWBRIDGE = IPv4Network("172.18.0.0/16")


def test_the_default_route_subnet_is_the_link_route_of_its_interface() -> None:
    assert bindhosts.default_route_subnet(ROUTES) == GWBRIDGE


@pytest.mark.parametrize("table", [
    pytest.param(ROUTES.replace("eth4\t00000000\t010012AC", "eth9\t0000FFFF\t010012AC"), id="no-default-route"),
    pytest.param(ROUTES + "eth2\t00000000\t0101E70A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", id="two-default-routes"),
    pytest.param(ROUTES.replace("eth4\t000012AC", "eth7\t000012AC"), id="no-link-route-beside-it"),
])
def test_without_one_default_route_on_one_link_there_is_no_subnet(table: str) -> None:
    assert bindhosts.default_route_subnet(table) is None


def test_a_route_that_is_down_or_unreachable_is_no_default_route() -> None:
    """`ip route add unreachable default` is a row with RTF_REJECT: not a way out; a second
    default route that is not up does not count as one either."""
    unreachable = "*\t00000000\t00000000\t0201\t0\t0\t0\t00000000\t0\t0\t0\n"
    down = "eth2\t00000000\t0101E70A\t0002\t0\t0\t0\t00000000\t0\t0\t0\n"
    assert bindhosts.default_route_subnet(ROUTES + unreachable + down) == GWBRIDGE
    assert bindhosts.default_route_subnet(ROUTES.replace("010012AC\t0003", "010012AC\t0201")) is None


@pytest.mark.parametrize("row", ["eth0\t00000000\n", "eth0\tnothex\t00000000\t0003\t0\t0\t0\t00000000\n",
                                 "eth4\t0000E70A\t00000000\t0001\t0\t0\t0\t00FF00FF\n"])
def test_a_route_table_not_in_the_kernels_format_is_a_config_error(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path, row: str) -> None:
    """A short row, a field that is not hex, a mask with gaps: a ConfigError naming the file, not a traceback."""
    table = tmp_path / "route"
    table.write_text(ROUTES + row)
    monkeypatch.setattr(bindhosts, "ROUTES", table)
    with pytest.raises(ConfigError, match="cannot read the routes"):
        bindhosts.own_default_route_subnet()


def test_a_list_binds_on_each_host_resolved_and_default_route_is_where_published_ports_arrive() -> None:
    """`subnet:...,default-route`: the edge overlay's address and docker_gwbridge's, in order."""
    loaded = settings_module.load({"AIRLOCK_INTAKE_BIND_HOST": "subnet:10.231.0.0/24,default-route",
                                   "AIRLOCK_INTAKE_PORT": "7401"})
    bound = bindhosts.resolve(loaded.bind_hosts, addresses("10.231.0.7", "10.231.1.3", "172.18.0.5"), GWBRIDGE)
    assert bound["intake"] == "10.231.0.7,172.18.0.5"
    assert bound["reader"] == "127.0.0.1"
    assert msgspec.structs.replace(loaded, bind_hosts=bound).bind_endpoints("intake") == [
        "tcp://10.231.0.7:7401", "tcp://172.18.0.5:7401"]


def test_default_route_without_one_or_outside_it_fails_naming_the_setting() -> None:
    hosts = {"intake": "subnet:10.231.0.0/24,default-route"}
    with pytest.raises(SettingsError, match="AIRLOCK_INTAKE_BIND_HOST=.*default-route needs exactly one default"):
        bindhosts.resolve(hosts, addresses("10.231.0.7", "172.18.0.5"), None)
    with pytest.raises(SettingsError, match=r"no address of this host is in 172\.18\.0\.0/16"):
        bindhosts.resolve(hosts, addresses("10.231.0.7"), GWBRIDGE)


@pytest.mark.parametrize("text", ["subnet:10.231.0.0/24,", ",default-route", "a,,b",
                                  "subnet:10.231.0.5/24,default-route", "127.0.0.1,127.0.0.1",
                                  "*,subnet:10.231.0.0/24", "0.0.0.0,default-route", "default-route, default-route"])
def test_a_bad_list_fails_at_load_naming_the_key(text: str) -> None:
    with pytest.raises(SettingsError, match="AIRLOCK_INTAKE_BIND_HOST"):
        settings_module.load({"AIRLOCK_INTAKE_BIND_HOST": text})


def test_plain_lists_read_no_address_and_bind_each() -> None:
    loaded = settings_module.load({"AIRLOCK_TRACE_BIND_HOST": "127.0.0.1,127.0.0.2", "AIRLOCK_TRACE_PORT": "7406"})
    assert loaded.with_bind_hosts_resolved([]).bind_endpoints("trace") == ["tcp://127.0.0.1:7406", "tcp://127.0.0.2:7406"]
