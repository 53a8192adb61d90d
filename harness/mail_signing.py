"""The customers' mail servers, for tests and the offline lab: a DKIM key made on the spot,
emails signed with it, and the key file the SMTP intake reads instead of DNS.

Real senders sign at their own domain's server and publish the public key in DNS; the lab
has no DNS, so the intake reads `selector._domainkey.domain` records from a file
(AIRLOCK_DKIM_KEYS, intake/authentication.py). Keys are made in pure Python (no openssl,
no cryptography package): 1024-bit RSA, the least RFC 8301 lets a verifier accept, as
keys for a test run that lives a few seconds, never for real mail.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import secrets
from dataclasses import dataclass
from pathlib import Path

import dkim

from airlock import senders, sources
from harness.campaign import CampaignEmail
from intake import headerblock
from intake.authentication import KeyFile, Verifier

SELECTOR = "lab"
KEY_BITS = 1024
PUBLIC_EXPONENT = 65537
_RSA_OID = bytes.fromhex("06092a864886f70d010101")  # rsaEncryption


@dataclass(frozen=True)
class SigningKey:
    private_pem: bytes
    public_txt: str  # the DNS TXT record: "v=DKIM1; k=rsa; p=..."

    @classmethod
    def generate(cls) -> SigningKey:
        while True:
            p, q = _prime(KEY_BITS // 2), _prime(KEY_BITS // 2)
            phi = (p - 1) * (q - 1)
            if p != q and phi % PUBLIC_EXPONENT and (p * q).bit_length() == KEY_BITS:
                break
        n, e = p * q, PUBLIC_EXPONENT
        d = pow(e, -1, phi)
        private = _seq(*(_int(v) for v in (0, n, e, d, p, q, d % (p - 1), d % (q - 1), pow(q, -1, p))))
        public = _seq(_seq(_RSA_OID, b"\x05\x00"), _tlv(0x03, b"\x00" + _seq(_int(n), _int(e))))
        pem = (b"-----BEGIN RSA PRIVATE KEY-----\n" + base64.encodebytes(private)
               + b"-----END RSA PRIVATE KEY-----\n")
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
    """One key per process, published for every sender's domain (made in about 0.2 s)."""
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


def _prime(bits: int) -> int:
    while True:
        candidate = secrets.randbits(bits) | (1 << (bits - 1)) | 1
        if _probably_prime(candidate):
            return candidate


def _probably_prime(n: int, rounds: int = 40) -> bool:
    """Miller-Rabin."""
    for small in (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % small == 0:
            return n == small
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for _ in range(rounds):
        x = pow(secrets.randbelow(n - 3) + 2, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _tlv(tag: int, body: bytes) -> bytes:
    size = len(body)
    length = bytes([size]) if size < 0x80 else bytes([0x80 | ((size.bit_length() + 7) // 8)]) + size.to_bytes(
        (size.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + body


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))
