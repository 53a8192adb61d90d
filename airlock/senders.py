"""Sender addresses: one exact form to compare, and what proves a sender.

An email's sender may only count as evidence (for a precondition that corroborates an
order's owner) when the SMTP intake authenticated it (intake/authentication.py: a DKIM
signature aligned with the From domain, or an Authentication-Results header from a
configured authserv-id). That proof travels with the email as `SenderProof`; any other
sender, from `airlock inject`, the page or unauthenticated SMTP, is `unverified`: shown to
people, never corroborating anything.

Addresses are compared exactly. Only the domain is case-insensitive (DNS says so), so only
the domain is lower-cased, and a non-ASCII domain is IDNA-encoded. The local part is kept as
written: casefolding it merges distinct mailboxes ("ſ" and "s", the Kelvin sign and "k").
A domain label that IDNA would have to map to another form (the Kelvin sign becomes "k")
is refused rather than mapped: two spellings never become one address.
"""  # noqa: RUF002  the long s is the example: it casefolds to s

from __future__ import annotations

import re
import unicodedata
from typing import Literal

# How a sender was proven: "none" (unverified), a DKIM signature the intake verified, or an
# Authentication-Results header from a trusted authserv-id (the MTA in front of the intake).
SenderProof = Literal["none", "dkim", "authres"]
PROVEN: frozenset[str] = frozenset({"dkim", "authres"})

# A fact's lineage for the sender: "intake" when the intake proved it, "unverified" when not.
AUTHENTICATED = "intake"
UNVERIFIED = "unverified"

MAX_LOCAL_CHARS = 64  # RFC 5321 4.5.3.1.1
MAX_DOMAIN_CHARS = 253  # RFC 1035, in its ASCII (IDNA) form
_LOCAL = re.compile(r"\A[^@\s<>()\[\]\\,;:\"\x00-\x1f\x7f]+\Z")
_ASCII_LABEL = re.compile(r"\A[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")


def lineage(proof: str) -> str:
    """The sender fact's lineage for a proof: only a proven sender is the intake's word."""
    return AUTHENTICATED if proof in PROVEN else UNVERIFIED


def domain_of(address: str) -> str:
    return address.rpartition("@")[2]


def normalized(address: str) -> str | None:
    """The exact form of an address to compare, or None if it is not one address.

    `Tom.Baker@Example.ORG` -> `Tom.Baker@example.org`; `kunde@bücher.de` ->
    `kunde@xn--bcher-kva.de`. The local part is never changed.
    """
    local, at, domain = address.strip().rpartition("@")
    if not at or not local or len(local) > MAX_LOCAL_CHARS or not _LOCAL.match(local):
        return None
    ascii_domain = _idna(_lower(domain))
    if ascii_domain is None:
        return None
    return f"{local}@{ascii_domain}"


def _lower(domain: str) -> str:
    """Lower-case a domain without merging scripts: the Kelvin sign's lower case is ASCII
    "k", so a character whose lower case leaves non-ASCII is kept (and IDNA refuses it)."""
    return "".join(low if char.isascii() or not low.isascii() else char
                   for char in domain for low in [char.lower()])


def _idna(domain: str) -> str | None:
    labels = domain.split(".")
    if len(labels) < 2:
        return None
    encoded = []
    for label in labels:
        if label.isascii():
            ascii_label = label
        else:
            # Only a label already in its one normal form: IDNA's mapping (NFKC, case
            # folding) would merge distinct spellings, so a label it changes is refused.
            if unicodedata.normalize("NFC", label) != label:
                return None
            try:
                ascii_label = label.encode("idna").decode("ascii")
                if ascii_label.encode("ascii").decode("idna") != label:
                    return None
            except UnicodeError:
                return None
        if not _ASCII_LABEL.match(ascii_label):
            return None
        encoded.append(ascii_label)
    joined = ".".join(encoded)
    return joined if len(joined) <= MAX_DOMAIN_CHARS else None
