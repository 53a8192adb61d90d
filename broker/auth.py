"""The broker's ZAP authenticator: CURVE on every endpoint, each role's key on its own,
and each person's key (keys/allow/people) on the intake endpoint, to decide escalations.

A CURVE server with no ZAP handler running accepts any client key, so this fails closed:
the broker does not start unless the authenticator thread runs, every endpoint's allow
list loaded, and a client with an unknown key is refused in a self-test.
"""

from __future__ import annotations

import time

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from airlock import keys
from airlock.errors import ConfigError
from airlock.keys import Pair
from airlock.settings import Settings
from airlock.transport import dealer, router

SELF_TEST_S = 0.3


def start(ctx: zmq.Context, settings: Settings) -> tuple[ThreadAuthenticator, Pair]:
    folder = settings.keys_folder
    if folder is None:
        raise ConfigError("no keys folder")
    server = keys.load(folder, "broker")
    auth = ThreadAuthenticator(ctx)
    auth.start()
    for endpoint in keys.ENDPOINT_ALLOWS:
        auth.configure_curve(domain=endpoint, location=str(folder / "allow" / endpoint))
    # People's keys come in on the intake endpoint too: a decision is taken only from one,
    # and the router knows whose it is (keys.approvers; the ZAP user id is the public key).
    people = folder / "allow" / keys.PEOPLE
    if people.is_dir():
        auth.certs["intake"].update(zmq.auth.load_certificates(str(people)))
    empty = [e for e in keys.ENDPOINT_ALLOWS if not auth.certs.get(e)]
    if not auth.is_alive() or empty:
        auth.stop()
        raise ConfigError(f"the authenticator is not ready (no allowed keys for {empty}); refusing to start")
    if not _refuses_a_stranger(ctx, server):
        auth.stop()
        raise ConfigError("the authenticator let an unknown key in during its self-test; refusing to start")
    return auth, server


def _refuses_a_stranger(ctx: zmq.Context, server: Pair) -> bool:
    """Connect with a fresh random key to a throwaway CURVE endpoint: nothing may arrive."""
    probe = router(ctx, "tcp://127.0.0.1:*", 4096, server, domain="intake")
    try:
        stranger_public, stranger_secret = zmq.curve_keypair()
        client = dealer(ctx, probe.getsockopt(zmq.LAST_ENDPOINT).decode(), 4096,
                        Pair(stranger_public, stranger_secret), server.public)
        try:
            client.send(b"hello?")
            deadline = time.monotonic() + SELF_TEST_S
            return not probe.poll(max(1, int((deadline - time.monotonic()) * 1000)))
        finally:
            client.close(linger=0)
    finally:
        probe.close(linger=0)
