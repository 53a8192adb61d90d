"""The SMTP intake: `hand_over` decides the reply, the Handler and the listener do the I/O.

Each message received over SMTP is submitted to the broker's intake endpoint as one `eml`
email, byte for byte as it arrived (CRLF line ends and all: the journal and the trace keep
what came in; the reader's prompt evens out line ends), whose origin is
`smtp:<envelope sender>`. So the size limit counts the CRLFs too: an email just under
AIRLOCK_MAX_EMAIL_BYTES as a file can be refused 552 over SMTP. Its sender is
the From address with what proves it (intake/authentication.py: a verified DKIM signature
of the From domain, or the Authentication-Results header of a trusted relay that delivered
it); without a proof it is unverified and corroborates nothing. The reply tells the sender the truth:

- 250 Queued as <message id>: the broker accepted it; its outcome is in the trace.
- 451 (transient): the broker did not answer; the sender keeps the email and retries.
  Mail is never answered 250 unless it was handed over, so nothing is dropped silently.
- 552 (from aiosmtpd): bigger than the stack keeps (data_size_limit, which EHLO advertises
  as SIZE): at MAIL for a SIZE= parameter over it, else once the DATA is in. Such mail never
  reaches the broker, and the sending server keeps it, knowing it was not delivered.

Any recipient is accepted: nothing is relayed, every email goes to the broker only.
A 451 whose Submit did reach a slow broker means the retry arrives twice (at least once,
never zero times).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Protocol

import msgspec
from aiosmtpd.smtp import SMTP, Envelope, Session

from airlock import keys, settings as settings_module
from airlock.client import IntakeClient
from airlock.errors import BrokerUnreachable, SettingsError
from airlock.senders import SenderProof
from airlock.settings import Settings
from airlock.terminal import shown
from airlock.transport import client_keys
from airlock.wire import Email
from intake import relays, sendercheck
from intake.authentication import UNPROVEN, NoKeys, Sender, Verifier, key_source

BROKER_TIMEOUT_S = 5.0  # how long one submission may wait for the broker's Accepted
STOP_POLL_S = 0.1  # how often the listener checks the stop event set by a signal
SHUTDOWN_GRACE_S = 5.0  # closing connections at stop may take this long, no longer
# Room in one broker frame for the Submit around the email: field names, ref, format and
# an origin no longer than an SMTP command line (about 520 bytes).
FRAME_HEADROOM_BYTES = 16 * 1024
HOSTNAME = "airlock-intake"  # fixed, so no session waits on a DNS lookup of our own name
# One email's sender check, key lookups in DNS included (dkimpy waits up to 5 s for one):
# past it the check is stopped and the sender is unverified (intake/sendercheck.py).
CHECK_BUDGET_S = 10.0
UNAVAILABLE = "451 4.3.0 airlock broker unavailable, try again later"


class SmtpSettings(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    port: int
    dkim_keys: str = ""  # AIRLOCK_DKIM_KEYS: "", "dns" or a key file (authentication.key_source)
    # AIRLOCK_TRUSTED_AUTHSERV_IDS and AIRLOCK_TRUSTED_RELAYS: a header counts only with both (intake/relays.py)
    authserv_ids: frozenset[str] = frozenset()
    relays: relays.TrustedRelays = relays.TrustedRelays()
    check_budget_s: float = CHECK_BUDGET_S  # AIRLOCK_SENDER_CHECK_BUDGET_S


def load_smtp(env: Mapping[str, str] | None = None) -> SmtpSettings:
    """AIRLOCK_SMTP_HOST, AIRLOCK_SMTP_PORT, AIRLOCK_DKIM_KEYS, AIRLOCK_TRUSTED_RELAYS,
    AIRLOCK_TRUSTED_AUTHSERV_IDS and AIRLOCK_SENDER_CHECK_BUDGET_S; a value that does not cast
    names its key."""
    read = settings_module.reader(os.environ if env is None else env)
    budget_s = read("AIRLOCK_SENDER_CHECK_BUDGET_S", float, f"{CHECK_BUDGET_S:g}")
    if not 0 < budget_s <= 300:
        raise SettingsError(f"setting AIRLOCK_SENDER_CHECK_BUDGET_S={budget_s:g}: must be over 0 and at most 300")
    trusted, ids = relays.parse(read("AIRLOCK_TRUSTED_RELAYS", str, ""), read("AIRLOCK_TRUSTED_AUTHSERV_IDS", str, ""))
    return SmtpSettings(host=read("AIRLOCK_SMTP_HOST", str, "127.0.0.1"),
                        port=read("AIRLOCK_SMTP_PORT", settings_module.port, "2525"),
                        dkim_keys=read("AIRLOCK_DKIM_KEYS", str, ""), authserv_ids=ids, relays=trusted,
                        check_budget_s=budget_s)


def verifier(smtp: SmtpSettings, max_email_bytes: int = 0) -> Verifier:
    """The sender verifier these settings describe; a key file that does not load stops the intake."""
    return Verifier(key_source(smtp.dkim_keys), smtp.authserv_ids, max_email_bytes, smtp.relays)


def data_size_limit(settings: Settings) -> int:
    """The largest DATA, in bytes, the stack keeps: AIRLOCK_MAX_EMAIL_BYTES, or less where a
    broker frame could not carry its Submit. EHLO advertises it as SIZE."""
    if settings.max_frame_bytes <= FRAME_HEADROOM_BYTES:
        raise SettingsError(f"setting AIRLOCK_MAX_FRAME_BYTES={settings.max_frame_bytes} is too small "
                            f"for the SMTP intake: must be over {FRAME_HEADROOM_BYTES}")
    return min(settings.max_email_bytes, settings.max_frame_bytes - FRAME_HEADROOM_BYTES)


class Submitter(Protocol):
    def submit(self, raw: bytes, origin: str, sender: str = "", sender_proof: SenderProof = "none") -> str:
        """Hand one email to the broker and return its message id; BrokerUnreachable if not."""
        ...


class BrokerSubmitter:
    """One IntakeClient, used by one thread at a time (a zmq socket is not thread-safe).

    After the broker fails to answer, the client is closed and the next email gets a fresh
    one, so a Submit left queued on the old socket is not delivered later behind a 451.
    """

    def __init__(self, connect: Callable[[], IntakeClient]) -> None:
        self._connect = connect
        self._client: IntakeClient | None = None
        self._lock = threading.Lock()

    def submit(self, raw: bytes, origin: str, sender: str = "", sender_proof: SenderProof = "none") -> str:
        with self._lock:
            client = self._client = self._client or self._connect()
            try:
                return client.submit_one(Email(raw, "eml", origin, sender, sender_proof))
            except BrokerUnreachable as exc:  # the sender hears 451; the console hears why
                print(f"intake: {shown(str(exc))}", file=sys.stderr, flush=True)
                self._discard()
                raise

    def _discard(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._discard()


def hand_over(submitter: Submitter, raw: bytes, mail_from: str, sender: Sender = UNPROVEN) -> str:
    """The SMTP reply for one received email: 250 with its id once the broker has it, else 451.
    `sender` is what `Verifier.authenticate` proved (or did not) about the From address."""
    try:
        message_id = submitter.submit(raw, f"smtp:{mail_from}", sender=sender.address, sender_proof=sender.proof)
    except BrokerUnreachable:
        return UNAVAILABLE
    return f"250 Queued as {message_id}"


class Handler:
    """aiosmtpd's handler: every DATA's sender is checked in a worker process
    (intake/sendercheck.py), then the email goes to `hand_over`, both off the event loop."""

    def __init__(self, submitter: Submitter, verify: Verifier | None = None,
                 check_budget_s: float = CHECK_BUDGET_S) -> None:
        self.submitter = submitter
        self.checks = sendercheck.SenderCheck(verify or Verifier(NoKeys()), check_budget_s)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802  (aiosmtpd calls handle_<VERB>)
        raw = envelope.original_content or b""
        mail_from = envelope.mail_from or ""
        # The client's (host, port), though aiosmtpd's annotation says a string.
        client: object = session.peer
        peer = str(client[0]) if isinstance(client, tuple) and client else ""
        sender = await self.checks.authenticate(raw, peer)
        reply = await asyncio.to_thread(hand_over, self.submitter, raw, mail_from, sender)
        # The envelope, the From and the peer's address are the sender's words: escaped for the console.
        print(f"intake: {reply} from=<{shown(mail_from)}> sender=<{shown(sender.address)}> "
              f"proof={sender.proof} ({shown(sender.why)}) rcpts={len(envelope.rcpt_tos)} bytes={len(raw)} "
              f"peer={shown(str(session.peer))}", flush=True)
        return reply


async def listen(smtp: SmtpSettings, handler: Handler, size_limit: int, broker: str,
                 stop: threading.Event) -> None:
    """Serve SMTP on smtp.host:smtp.port until `stop` is set, then close every connection."""
    loop = asyncio.get_running_loop()
    sessions: weakref.WeakSet[SMTP] = weakref.WeakSet()

    def session() -> SMTP:
        protocol = SMTP(handler, data_size_limit=size_limit, enable_SMTPUTF8=True,
                        hostname=HOSTNAME, ident="airlock intake", loop=loop)
        sessions.add(protocol)
        return protocol

    try:
        server = await loop.create_server(session, smtp.host, smtp.port)
    except OSError as exc:
        raise SettingsError(f"cannot listen on {smtp.host}:{smtp.port} (AIRLOCK_SMTP_HOST, "
                            f"AIRLOCK_SMTP_PORT): {exc.strerror or exc}") from exc
    # One start line, which says what proves a sender: with no keys and no trusted authserv-id,
    # every sender is unverified and the guarded task answers nobody.
    paired = smtp.relays.networks and smtp.authserv_ids
    proofs = (f"DKIM keys from {shown(smtp.dkim_keys)}" if smtp.dkim_keys else "no DKIM keys") + ", " + (
        f"Authentication-Results from {shown(', '.join(sorted(smtp.authserv_ids)))} on mail relayed by "
        f"{', '.join(str(n) for n in smtp.relays.networks)}" if paired else "no trusted relay")
    if unpaired := relays.unpaired(smtp.relays, smtp.authserv_ids):
        print(f"intake: warning: {unpaired}", file=sys.stderr, flush=True)
    print(f"intake: listening on smtp://{smtp.host}:{smtp.port}, handing mail to {broker} "
          f"(up to {size_limit} bytes each); senders proven by: {proofs}", flush=True)
    try:
        while not stop.is_set():  # noqa: ASYNC110  `stop` is a threading.Event a signal handler sets, not an asyncio one
            await asyncio.sleep(STOP_POLL_S)
    finally:
        server.close()
        for protocol in list(sessions):
            if protocol.transport is not None:
                protocol.transport.close()
        try:
            await asyncio.wait_for(server.wait_closed(), SHUTDOWN_GRACE_S)
        except TimeoutError:
            pass  # a connection that will not close; asyncio.run tears it down


def serve(settings: Settings, task: object, stop: threading.Event) -> None:
    """Run until `stop` is set. The intake needs no task: it only hands emails over."""
    smtp = load_smtp()
    verify = verifier(smtp, settings.max_email_bytes)
    # Its own key, not the CLI's "intake": the broker keeps a sender proof from this key
    # alone (keys.SMTP_ROLE). Loaded now, so a missing key stops the intake at start (78)
    # rather than answering every sender 451.
    client_keys(settings, keys.SMTP_ROLE)
    submitter = BrokerSubmitter(lambda: IntakeClient(settings, timeout_s=BROKER_TIMEOUT_S, role=keys.SMTP_ROLE))
    sendercheck.start_server()
    handler = Handler(submitter, verify, smtp.check_budget_s)
    try:
        asyncio.run(listen(smtp, handler, data_size_limit(settings),
                            settings.endpoint("intake"), stop))
    finally:
        handler.checks.close()
        submitter.close()
