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
with no relay, or a relay with no authserv-id, proves nobody: the intake starts all the
same (every sender is then unverified, which only ever refuses more) and says so on its
start line and on stderr, naming the missing setting (`unpaired`).
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
    "192.0.2.0/28", "2001:db8::/64") and AIRLOCK_TRUSTED_AUTHSERV_IDS (comma-separated). A
    network that is not one is a SettingsError naming the key; one setting without the other
    is allowed and proves nobody (`unpaired` says so)."""
    ids = frozenset(i.strip() for i in authserv_ids.split(",") if i.strip())
    networks = []
    for written in (r.strip() for r in relays.split(",")):
        if not written:
            continue
        try:
            networks.append(ipaddress.ip_network(written, strict=True))
        except ValueError as exc:  # "10.0.0.5/24" too: host bits set, so which was meant?
            raise SettingsError(f"setting AIRLOCK_TRUSTED_RELAYS={relays!r}: {exc}") from exc
    return TrustedRelays(tuple(networks)), ids


def unpaired(trusted: TrustedRelays, ids: frozenset[str]) -> str:
    """Why no Authentication-Results header can count with these settings ("" when they pair)."""
    if ids and not trusted.networks:
        return ("AIRLOCK_TRUSTED_AUTHSERV_IDS is set without AIRLOCK_TRUSTED_RELAYS: no Authentication-Results "
                "header counts, as one counts only on mail a trusted relay (its address or network) delivered")
    if trusted.networks and not ids:
        return ("AIRLOCK_TRUSTED_RELAYS is set without AIRLOCK_TRUSTED_AUTHSERV_IDS: no Authentication-Results "
                "header counts, as none names the authserv-id the relay writes")
    return ""
