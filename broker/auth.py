"""The broker's ZAP authenticator: CURVE on every endpoint, each role's key on its own,
and each person's key (keys/allow/people) on the intake endpoint, to decide escalations.

A CURVE server with no ZAP handler running accepts any client key, so this fails closed:
the broker does not start unless the authenticator thread runs, every endpoint's allow
list loaded, and a client with an unknown key is refused in a self-test.
"""

from __future__ import annotations

import sys
import time

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from airlock import keys
from airlock.errors import ConfigError, KeysMissing
from airlock.keys import Pair
from airlock.settings import Settings
from airlock.transport import dealer, router

SELF_TEST_S = 0.3
OFF = "OFF (AIRLOCK_INSECURE=1, no keys): any peer may connect to any endpoint"


def required(settings: Settings) -> bool:
    """Whether the broker authenticates (it has keys); without keys, ConfigError unless the
    insecure switch is on, and then a warning on stderr that no one can miss. Serving in
    the clear by accident (no keys found, say a mistyped AIRLOCK_KEYS) is how a stranger's
    process came to read emails meant for the reader."""
    try:
        if settings.keys_folder is not None:
            return True
    except KeysMissing as exc:  # keys where this user cannot read them: a start-up refusal too
        raise ConfigError(str(exc)) from None
    looked = " or ".join(str(folder) for folder in settings.key_folders_looked_in)
    if not settings.insecure:
        raise ConfigError(f"no CURVE keys (AIRLOCK_KEYS is not set, none in {looked}): refusing to serve without "
                          "authentication; make keys with `airlock keys --out DIR` and set AIRLOCK_KEYS=DIR "
                          "(`airlock up` makes its own), or set AIRLOCK_INSECURE=1 to serve unauthenticated on purpose")
    print("broker: WARNING: AUTHENTICATION IS OFF (AIRLOCK_INSECURE=1 and no keys): any process that can reach "
          "these ports may inject email, read the trace and take work as a reader, validator or actor",
          file=sys.stderr, flush=True)
    return False


def start(ctx: zmq.Context, settings: Settings) -> tuple[ThreadAuthenticator, Pair]:
    folder = settings.keys_folder
    if folder is None:
        raise ConfigError("no keys folder")
    server = keys.load(folder, "broker")
    for allowed in (*keys.ENDPOINT_ALLOWS, keys.PEOPLE):
        keys.check_allowed(folder / "allow" / allowed)
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
        client = dealer(ctx, probe.get_string(zmq.LAST_ENDPOINT), 4096,
                        Pair(stranger_public, stranger_secret), server.public)
        try:
            client.send(b"hello?")
            deadline = time.monotonic() + SELF_TEST_S
            return not probe.poll(max(1, int((deadline - time.monotonic()) * 1000)))
        finally:
            client.close(linger=0)
    finally:
        probe.close(linger=0)
