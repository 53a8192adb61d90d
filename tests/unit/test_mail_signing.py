"""The lab's DKIM keys: made by the cryptography package, in the encodings dkimpy and the
intake's key file read, and signing what the intake then verifies."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from harness import mail_signing
from harness.mail_signing import SigningKey


def _public_der(key: SigningKey) -> bytes:
    fields = dict(part.strip().split("=", 1) for part in key.public_txt.split(";"))
    assert fields["v"] == "DKIM1" and fields["k"] == "rsa"
    return base64.b64decode(fields["p"])


def test_the_key_comes_from_the_cryptography_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """SigningKey.generate asks rsa.generate_private_key for the key, with the declared size."""
    made: list[rsa.RSAPrivateKey] = []
    real = rsa.generate_private_key

    def generate(public_exponent: int, key_size: int) -> rsa.RSAPrivateKey:
        made.append(real(public_exponent=public_exponent, key_size=key_size))
        return made[-1]

    monkeypatch.setattr(rsa, "generate_private_key", generate)
    key = SigningKey.generate()
    assert len(made) == 1
    loaded = serialization.load_pem_private_key(key.private_pem, password=None)
    assert isinstance(loaded, rsa.RSAPrivateKey)
    assert loaded.private_numbers() == made[0].private_numbers()


def test_the_published_key_is_the_private_keys_public_half() -> None:
    """The TXT record's p= is the SubjectPublicKeyInfo of the PEM's key, RSA, KEY_BITS, e=65537."""
    key = SigningKey.generate()
    private = serialization.load_pem_private_key(key.private_pem, password=None)
    public = serialization.load_der_public_key(_public_der(key))
    assert isinstance(private, rsa.RSAPrivateKey) and isinstance(public, rsa.RSAPublicKey)
    assert public.public_numbers() == private.public_key().public_numbers()
    assert public.key_size == mail_signing.KEY_BITS
    assert public.public_numbers().e == mail_signing.PUBLIC_EXPONENT
    assert key.private_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----\n")  # PKCS#1, as dkimpy reads


def test_the_lab_key_is_made_once_per_process() -> None:
    """Every signed email of a process shares one key, so a run pays for one key."""
    assert mail_signing._lab_key() is mail_signing._lab_key()
