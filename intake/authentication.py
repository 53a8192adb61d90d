"""What the SMTP intake can prove about who sent an email (airlock/senders.py says why).

Data: the raw email as received, a DNS TXT source for DKIM keys (a local key file in tests
and the offline lab, or the system resolver), and the authserv-ids this intake trusts.
Readers: intake/app.py, once per received email, before it hands the email over.
Rationale: the guarded task corroborates an order's owner against the sender. The SMTP
envelope and the From header are the sender's own words (27 of 57 data-only attacks got
through with a forged one), so the sender counts only when a signature proves it:

  dkim      a DKIM-Signature verifies with dkimpy against the TXT source, its d= is exactly
            the From address's domain (DMARC's strict alignment), it signs the whole body
            (no l=: a tail nobody signed may carry the attack) and every header the reader
            reads that the email carries (intake/headerblock.py: SINGLE), and the email has
            exactly one From header with one address;
  authres   the email was delivered by a trusted relay (intake/relays.py: its SMTP client's
            address), and the topmost Authentication-Results header, the one that relay
            adds, names a configured authserv-id and says dkim=pass with header.d, or
            dmarc=pass with header.from, equal to the From domain; each DKIM-Signature of
            that domain in the email signs every header the reader reads that it carries.
            Lower down, from another id, or on mail from any other client, the header is the
            sender's own text and ignored (RFC 8601, section 5).

Either holds only for a header block dkimpy and the reader split alike, within the bounds
that keep dkimpy's work small (intake/headerblock.py); the check runs in a worker process
with a time budget (intake/sendercheck.py), so no email holds another sender's reply.

Anything else is "none": the sender stays unverified and corroborates nothing. SPF is not
consulted: it proves only the envelope domain for the connecting IP, not the From address
the guard compares, and counts under DMARC only when aligned, which `authres` covers when
an MTA in front checked it. Authentication is per domain: whoever the domain lets sign may
send as any of its mailboxes, as with DMARC everywhere.
"""

from __future__ import annotations

import email.utils
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import authres
import dkim

from airlock import senders
from airlock.errors import SettingsError
from airlock.senders import SenderProof
from intake import headerblock
from intake.relays import TrustedRelays

# A From header longer than this is not one mailbox (254 bytes, plus a display name within
# RFC 5322's 998-byte line): refused before the address parser, whose time grows with it.
MAX_FROM_BYTES = 2048
MIN_KEY_BITS = 1024  # RFC 8301: verifiers must refuse RSA keys under 1024 bits

TxtLookup = Callable[..., bytes | None]  # dkimpy's dnsfunc: (name, timeout=...) -> TXT record or None


@dataclass(frozen=True)
class Sender:
    address: str  # the From address in its exact form (senders.normalized), "" if none
    proof: SenderProof
    why: str  # for the console and the trace: what proved it, or why nothing did


UNPROVEN = Sender("", "none", "not checked")
NO_RELAYS = TrustedRelays()


class KeyFile:
    """DKIM public keys served from a local file, as dkimpy's dnsfunc: tests and the offline
    lab publish keys here instead of in DNS.

        [keys]
        "lab._domainkey.example.org" = "v=DKIM1; k=rsa; p=MIIBIjAN..."
    """

    def __init__(self, records: dict[str, str]) -> None:
        self.records = {name.lower().rstrip("."): value for name, value in records.items()}

    @classmethod
    def load(cls, path: Path) -> KeyFile:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            records = data.get("keys", {})
            if not isinstance(records, dict) or not all(isinstance(v, str) for v in records.values()):
                raise ValueError("[keys] must map each 'selector._domainkey.domain' to a TXT string")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
            raise SettingsError(f"setting AIRLOCK_DKIM_KEYS={path}: {exc}") from exc
        return cls(records)

    def __call__(self, name: bytes, timeout: float = 5) -> bytes | None:
        found = self.records.get(name.decode("ascii", "replace").lower().rstrip("."))
        return None if found is None else found.encode("ascii", "replace")


class NoKeys:
    """No key source configured: no DKIM signature can verify, every sender is unverified."""

    def __call__(self, name: bytes, timeout: float = 5) -> bytes | None:
        return None


def key_source(setting: str) -> TxtLookup:
    """AIRLOCK_DKIM_KEYS: "" (none: nothing verifies), "dns" (the system resolver, through
    dnspython), or the path of a key file (KeyFile)."""
    if not setting:
        return NoKeys()
    if setting == "dns":
        try:
            import dns.resolver  # noqa: F401  dkimpy's resolver needs dnspython; fail at start, not per email
        except ImportError as exc:
            raise SettingsError("setting AIRLOCK_DKIM_KEYS=dns needs dnspython: pip install dnspython") from exc
        return dkim.dnsplug.get_txt
    return KeyFile.load(Path(setting))


@dataclass(frozen=True)
class Verifier:
    keys: TxtLookup
    authserv_ids: frozenset[str] = frozenset()  # counted only on mail one of `relays` delivered
    # Work is bounded by the email's size: one over the broker's limit (AIRLOCK_MAX_EMAIL_BYTES)
    # is rejected there anyway, so it is not parsed here (0: no bound, for tests).
    max_bytes: int = 0
    # Who may vouch with Authentication-Results (intake/relays.py): nobody unless configured.
    relays: TrustedRelays = NO_RELAYS

    def authenticate(self, raw: bytes, peer: str = "") -> Sender:
        """The From address and what proves it, never an exception: hostile bytes give "none".
        `peer` is the address of the SMTP client that delivered the email ("" if none did)."""
        if self.max_bytes and len(raw) > self.max_bytes:
            return Sender("", "none", f"{len(raw)} bytes, over the {self.max_bytes}-byte email limit: not read")
        block = headerblock.read(raw)
        if isinstance(block, headerblock.NotProvable):
            return Sender("", "none", f"no proof can hold: {block.reason}")
        address, problem = _from_address(block.values("from"))
        if not address:
            return Sender("", "none", problem)
        domain = senders.domain_of(address)
        relayed = self.relays.delivered(peer)
        vouched, why_not_vouched = _by_authres(block, self.authserv_ids, domain) if relayed else (None, "")
        if vouched is not None:
            return Sender(address, vouched, why_not_vouched)
        try:
            parsed = dkim.DKIM(raw, minkey=MIN_KEY_BITS)
        except Exception as exc:  # noqa: BLE001  dkimpy's parser on hostile bytes: no proof, not a crash
            return Sender(address, "none", f"unreadable headers: {type(exc).__name__}")
        proven, why = _by_dkim(parsed, block, self.keys, domain)
        if proven is not None:
            return Sender(address, proven, why)
        relay = (why_not_vouched or "the trusted relay's Authentication-Results header does not vouch for it") \
            if relayed else "no trusted relay delivered it"
        return Sender(address, "none", f"{why or f'no DKIM signature of {domain} verified'}; {relay}")


def _by_authres(block: headerblock.Block, authserv_ids: frozenset[str],
                domain: str) -> tuple[SenderProof | None, str]:
    """("authres", what it says) if the topmost Authentication-Results header is a trusted
    id's pass for `domain`, else (None, why not, or "" if it says nothing of the kind)."""
    found = block.values("authentication-results")
    if not found:
        return None, ""
    try:
        header = authres.AuthenticationResultsHeader.parse_value(" ".join(found[0].decode("utf-8", "replace").split()))
    except Exception:  # noqa: BLE001  authres raises its own errors and, on odd input, plain ones
        return None, ""
    if header.authserv_id not in authserv_ids:
        return None, ""
    for result in header.results:
        wanted = {"dkim": ("header", "d"), "dmarc": ("header", "from")}.get(result.method)
        if wanted is None or result.result != "pass":
            continue
        named = [p.value for p in result.properties if (p.type, p.name) == wanted]
        if any(senders.normalized(f"x@{value}") == f"x@{domain}" for value in named):
            left_out = _left_out_by_signatures_of(block, domain)
            if left_out is not None:
                return None, (f"{header.authserv_id} says {result.method}=pass, but a signature of {domain} "
                              f"does not sign the {left_out!r} header the reader reads")
            return "authres", f"{result.method}=pass for {domain} from {header.authserv_id}"
    return None, ""


def _left_out_by_signatures_of(block: headerblock.Block, domain: str) -> str | None:
    """A header the reader reads that some DKIM-Signature of `domain` in the email does not sign."""
    for value in block.values("dkim-signature"):
        try:
            tags = dkim.util.parse_tag_value(value)
        except Exception:  # noqa: BLE001  not a signature anyone verified: it vouches for nothing
            continue
        if senders.normalized(f"x@{tags.get(b'd', b'').decode('ascii', 'replace')}") != f"x@{domain}":
            continue
        left_out = headerblock.unsigned(block, _signed_names(tags.get(b"h", b"")))
        if left_out is not None:
            return left_out
    return None


def _signed_names(h: bytes) -> frozenset[str]:
    return frozenset(name.strip().decode("ascii", "replace").lower() for name in h.split(b":"))


def _from_address(values: list[bytes]) -> tuple[str, str]:
    """(exact From address, "") or ("", why not): exactly one From header, one address."""
    if len(values) != 1:
        return "", f"{len(values)} From headers: the sender is ambiguous"
    if len(values[0]) > MAX_FROM_BYTES:
        return "", f"the From header is over {MAX_FROM_BYTES} bytes: not one mailbox"
    found = email.utils.getaddresses([values[0].decode("utf-8", "replace")])
    if len(found) != 1:
        return "", "the From header holds no single address"
    address = senders.normalized(found[0][1])
    return (address, "") if address else ("", "the From header holds no usable address")


def _by_dkim(parsed: dkim.DKIM, block: headerblock.Block, keys: TxtLookup,
             domain: str) -> tuple[SenderProof | None, str]:
    """("dkim", which signature) for the first that proves the sender, else (None, why the last did not)."""
    why = ""
    for index in range(len(block.values("dkim-signature"))):  # at most headerblock.MAX_SIGNATURES
        try:
            if not parsed.verify(idx=index, dnsfunc=keys):
                continue
        except Exception:  # noqa: BLE001  DKIMException, or plain errors on hostile tags: no proof
            continue
        fields = parsed.signature_fields
        signer = fields.get(b"d", b"").decode("ascii", "replace")
        if b"l" in fields or b"from" not in parsed.include_headers \
                or senders.normalized(f"x@{signer}") != f"x@{domain}":
            continue  # a partial body, an unsigned From, or another domain than the From's
        left_out = headerblock.unsigned(block, frozenset(n.decode("ascii", "replace") for n in parsed.include_headers))
        if left_out is not None:
            why = f"the signature of {domain} verified but does not sign the {left_out!r} header the reader reads"
            continue
        return "dkim", f"dkim d={domain} s={fields.get(b's', b'').decode('ascii', 'replace')}"
    return None, why
