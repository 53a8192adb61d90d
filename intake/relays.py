"""Which SMTP clients may vouch for a sender: the relays in front of the intake, by address.

Data: AIRLOCK_TRUSTED_RELAYS (addresses and networks) and AIRLOCK_TRUSTED_AUTHSERV_IDS, read
once at start; the address of the SMTP client that delivered each email (aiosmtpd's peer).
Readers: intake/authentication.py, before it reads any Authentication-Results header.
Rationale: anyone can write `Authentication-Results: mx.shop.example; dkim=pass` into the
email they send. The header is the relay's word only on an email the relay delivered: a
border MTA removes every copy that claims its own authserv-id and adds its own on top
(RFC 8601, section 5). So a trusted authserv-id counts only on an email whose SMTP client is
a trusted relay, and then only in the topmost Authentication-Results header; on an email
from any other client every such header is the sender's own text. A trusted authserv-id
with no relay, or a relay with no authserv-id, would be a setting that proves nothing or
trusts nobody: the intake refuses both at start rather than run with one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from airlock.errors import SettingsError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class TrustedRelays:
    networks: tuple[Network, ...] = ()

    def delivered(self, peer: str) -> bool:
        """True if `peer` (the SMTP client's address, "" if unknown) is a trusted relay."""
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack listener sees an IPv4 client as ::ffff:a.b.c.d
        return any(address in network for network in self.networks)


def parse(relays: str, authserv_ids: str) -> tuple[TrustedRelays, frozenset[str]]:
    """AIRLOCK_TRUSTED_RELAYS (comma-separated addresses or networks: "10.0.0.25",
    "192.0.2.0/28", "2001:db8::/64") and AIRLOCK_TRUSTED_AUTHSERV_IDS (comma-separated),
    both set or both empty; anything else is a SettingsError naming the key."""
    ids = frozenset(i.strip() for i in authserv_ids.split(",") if i.strip())
    networks = []
    for written in (r.strip() for r in relays.split(",")):
        if not written:
            continue
        try:
            networks.append(ipaddress.ip_network(written, strict=True))
        except ValueError as exc:  # "10.0.0.5/24" too: host bits set, so which was meant?
            raise SettingsError(f"setting AIRLOCK_TRUSTED_RELAYS={relays!r}: {exc}") from exc
    if ids and not networks:
        raise SettingsError(f"setting AIRLOCK_TRUSTED_AUTHSERV_IDS={authserv_ids!r} needs AIRLOCK_TRUSTED_RELAYS: "
                            "an Authentication-Results header counts only on mail a trusted relay delivered "
                            "(its address or network)")
    if networks and not ids:
        raise SettingsError(f"setting AIRLOCK_TRUSTED_RELAYS={relays!r} needs AIRLOCK_TRUSTED_AUTHSERV_IDS: "
                            "the authserv-id the relay writes in its Authentication-Results header")
    return TrustedRelays(tuple(networks)), ids
