"""CURVE keys: one pair per role, and which public keys each broker endpoint allows.

    keys/broker.key, broker.key_secret        the broker's pair (its public key is the
                                              "server key" every client must know)
    keys/<role>.key, <role>.key_secret        intake, reader, validator, actor, dashboard
    keys/allow/<endpoint>/<role>.key          the public keys an endpoint lets in
    keys/services/<service>/                  what one compose container mounts at /keys

Each role may use only its own endpoint: the reader's key is allowed on the reader
endpoint and nowhere else. A process needs only its own secret key and the broker's
public key (in compose each container mounts just those).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

from airlock.errors import ConfigError

CLIENT_ROLES = ("intake", "reader", "validator", "actor", "dashboard")
ENDPOINT_ALLOWS = {"intake": ("intake", "dashboard"), "reader": ("reader",), "validator": ("validator",),
                   "actor": ("actor",), "trace": ("dashboard",)}
# What each container of the compose lab mounts at /keys: its own secret key only (and the
# broker's public key; the broker gets the allow lists).
SERVICE_KEYS = {"broker": ("broker",), "reader": ("reader",), "validator": ("validator",), "actor": ("actor",),
                "intake": ("intake",), "dashboard": ("dashboard",), "inject": ("intake",)}


@dataclass(frozen=True)
class Pair:
    public: bytes
    secret: bytes | None


def generate(folder: Path, force: bool = False) -> list[Path]:
    """Create every role's key pair and the allow lists; refuse to overwrite unless forced."""
    if (folder / "broker.key_secret").exists() and not force:
        raise ConfigError(f"keys already exist in {folder} (use --force to replace them)")
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for role in ("broker", *CLIENT_ROLES):
        with tempfile.TemporaryDirectory() as scratch:
            public, secret = zmq.auth.create_certificates(scratch, role)
            for path in (public, secret):
                target = folder / Path(path).name
                shutil.copyfile(path, target)
                made.append(target)
        (folder / f"{role}.key_secret").chmod(0o600)
    for endpoint, roles in ENDPOINT_ALLOWS.items():
        allow = folder / "allow" / endpoint
        if allow.exists():
            shutil.rmtree(allow)
        allow.mkdir(parents=True)
        for role in roles:
            shutil.copyfile(folder / f"{role}.key", allow / f"{role}.key")
    for service, roles in SERVICE_KEYS.items():
        own = folder / "services" / service
        if own.exists():
            shutil.rmtree(own)
        own.mkdir(parents=True)
        shutil.copyfile(folder / "broker.key", own / "broker.key")
        for role in roles:
            shutil.copyfile(folder / f"{role}.key_secret", own / f"{role}.key_secret")
            (own / f"{role}.key_secret").chmod(0o600)
        if service == "broker":
            shutil.copytree(folder / "allow", own / "allow")
    return made


def load(folder: Path, role: str, *, secret: bool = True) -> Pair:
    """A role's pair (or only its public key), with the file named in any error."""
    path = folder / (f"{role}.key_secret" if secret else f"{role}.key")
    try:
        public, private = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"CURVE key {path}: {exc}") from None
    if secret and not private:
        raise ConfigError(f"CURVE key {path} holds no secret key")
    return Pair(public, private)
