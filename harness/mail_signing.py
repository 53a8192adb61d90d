"""The customers' mail servers, for tests and the offline lab: a DKIM key made on the spot,
emails signed with it, and the key file the SMTP intake reads instead of DNS.

Real senders sign at their own domain's server and publish the public key in DNS; the lab
has no DNS, so the intake reads `selector._domainkey.domain` records from a file
(AIRLOCK_DKIM_KEYS, intake/authentication.py). Keys come from the cryptography package:
1024-bit RSA, the least RFC 8301 lets a verifier accept, as keys for a test run that lives
a few seconds, never for real mail. The private key is PKCS#1 PEM (what dkimpy signs with),
the public one a SubjectPublicKeyInfo in the TXT record, as a domain publishes it.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airlock import senders, sources
from harness.campaign import CampaignEmail
from intake import headerblock
from intake.authentication import KeyFile, Verifier

SELECTOR = "lab"
KEY_BITS = 1024
PUBLIC_EXPONENT = 65537


@dataclass(frozen=True)
class SigningKey:
    private_pem: bytes
    public_txt: str  # the DNS TXT record: "v=DKIM1; k=rsa; p=..."

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh key pair from the cryptography package (OpenSSL's generator and primality
        tests: a security course shows no hand-made key), in the encodings its readers take."""
        private = rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=KEY_BITS)
        pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption())
        public = private.public_key().public_bytes(serialization.Encoding.DER,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(pem, "v=DKIM1; k=rsa; p=" + base64.b64encode(public).decode("ascii"))

    def sign(self, raw: bytes, domain: str, selector: str = SELECTOR) -> bytes:
        """`raw` with a DKIM-Signature of `domain` prepended (relaxed/simple), signing every
        header the reader reads (headerblock.SINGLE), each once: one it lacks is signed absent,
        so nobody can add it later, as careful signers oversign."""
        signature = dkim.sign(raw, selector.encode(), domain.encode(), self.private_pem,
                              include_headers=[name.encode() for name in sorted(headerblock.SINGLE)])
        # dkimpy writes CRLF; an email kept as a file ends its lines in LF alone, and a block
        # of both proves nothing (headerblock.read), so the signature takes the email's ends.
        return signature.replace(b"\r\n", headerblock.line_end(raw)) + raw


def write_key_file(path: Path, published: dict[str, SigningKey], selector: str = SELECTOR) -> Path:
    """The intake's AIRLOCK_DKIM_KEYS file: each domain's public key under `selector`."""
    lines = ["[keys]"] + [f'"{selector}._domainkey.{domain}" = "{key.public_txt}"'
                          for domain, key in sorted(published.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@functools.cache
def _lab_key() -> SigningKey:
    """One key per process, published for every sender's domain (made in a few milliseconds)."""
    return SigningKey.generate()


def signed_and_verified(emails: list[CampaignEmail]) -> list[CampaignEmail]:
    """Each .eml signed by its From domain, then authenticated by the intake's Verifier: the
    sender and proof it finds travel with the email (unverified if it finds none)."""
    key, signed = _lab_key(), []
    for item in emails:
        address = sources.sender_of(item.raw, item.format) if item.format == "eml" else ""
        signed.append(dataclasses.replace(item, raw=key.sign(item.raw, senders.domain_of(address)))
                      if address else item)
    domains = {senders.domain_of(sources.sender_of(item.raw, "eml")) for item in signed if item.format == "eml"}
    verify = Verifier(KeyFile({f"{SELECTOR}._domainkey.{d}": key.public_txt for d in domains if d}))
    proven = []
    for item in signed:
        sender = verify.authenticate(item.raw) if item.format == "eml" else None
        proven.append(item if sender is None else
                      dataclasses.replace(item, sender=sender.address, sender_proof=sender.proof))
    return proven

