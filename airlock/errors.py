"""The exceptions airlock raises, as a tree.

    AirlockError                 anything airlock itself refuses
     +-- ConfigError             bad start-up input; every service fails closed on it
     |    +-- SettingsError      an environment key is missing or will not cast
     |    +-- TaskError          a task file is unreadable, unknown keys, bad plan
     |    +-- CatalogError       the actor's catalog is bad or misses a planned tool
     +-- BrokerUnreachable       the CLI got no answer from the broker in time
     |    +-- KeyRefused         the broker answered the handshake: not with this key
     |    +-- QueueFull          the broker's queue stayed full (AIRLOCK_QUEUE_MAX_BYTES): retry later
     |    +-- DiskFull           the broker could not keep the email: its disk is full; retry later
     +-- KeysMissing             a client found no CURVE keys where it looked
     +-- RequestRefused          the request was understood and refused: an unknown id, a
     |    |                      decision the task does not take
     |    +-- EmailTooLarge      an email over the size limit, refused before sending
     |    +-- LinkOutside        a link in a folder of emails that leads out of it
     +-- AlreadyRunning          `airlock up` found a live stack on its data dir
     |    +-- LockHeld           a data dir's lock (airlock.locks) is held by a live process
     +-- UsageError              the CLI was asked for something it cannot do

Errors that come from the outside world while running (a frame that does not decode, a
dead model, a broken email) are *values* on the wire, not exceptions: see wire.py.
The CLI translates every AirlockError into one line on stderr and a non-zero exit.
"""


class AirlockError(Exception):
    """Base of every error airlock raises on purpose."""


class ConfigError(AirlockError):
    """Start-up configuration is wrong; the process must not start."""


class SettingsError(ConfigError):
    """An AIRLOCK_* setting is missing or malformed."""


class TaskError(ConfigError):
    """A task file cannot be used."""


class CatalogError(ConfigError):
    """The tool catalog is invalid or does not cover the plan."""


class BrokerUnreachable(AirlockError):
    """The broker did not answer within the allowed time."""


class KeyRefused(BrokerUnreachable):
    """The broker is there but refused this client's key at the CURVE handshake."""


class QueueFull(BrokerUnreachable):
    """The broker answered, but refused email after email as its queue was full, for longer
    than the client would wait. A temporary failure like a silent broker, so whoever
    answers one (the SMTP intake with 451, the page) answers this the same way; the
    CLI exits 75 (EX_TEMPFAIL): try again later."""


class DiskFull(BrokerUnreachable):
    """The broker answered, but refused to accept an email because it could not write it
    down (its data dir's disk is full or failing). Temporary like QueueFull, so the SMTP
    intake answers 451; the CLI says "not accepted: disk full" and exits 74 (EX_IOERR)."""


class KeysMissing(AirlockError):
    """A client of an authenticated broker has no keys to present."""


class RequestRefused(AirlockError):
    """A well-formed request that cannot be granted; not a usage error (exit 1, not 2)."""


class EmailTooLarge(RequestRefused):
    """An email bigger than the limit; the client refuses it before sending a byte."""


class LinkOutside(RequestRefused):
    """A symbolic link in a folder of emails whose target is outside that folder: reading
    it would send a file the folder's author chose (a key, a password file) to the model
    and the trace. Refused, naming the link, before anything is sent."""


class AlreadyRunning(AirlockError):
    """Another `airlock up` holds this data dir's lock; a second stack would share its
    ports, keys and pid files."""


class LockHeld(AlreadyRunning):
    """A lock of airlock.locks that a live process holds: `what` (e.g. "broker") may run
    once per data dir. `holder` is the pid the lock file names, a hint (None if unknown)."""

    def __init__(self, path: object, what: str, holder: int | None, advice: str = "stop it first") -> None:
        self.path, self.what, self.holder = path, what, holder
        super().__init__(f"another {what} (pid {holder or 'unknown'}) holds {path}: one {what} "
                         f"per data dir; {advice}")


class UsageError(AirlockError):
    """A CLI request that cannot be carried out (missing file, bad flag value)."""


# The exit code of a process that refused its configuration (sysexits' EX_CONFIG). The
# supervisor does not restart such a child: restarting cannot fix a bad file.
EX_CONFIG = 78
# The exit code of `airlock up` refused because another stack holds its data dir (sysexits'
# EX_CANTCREAT: the stack cannot be made there), distinct so a script can tell it apart.
EX_ALREADY_RUNNING = 73
# sysexits' EX_IOERR: the broker could not write an email down (its disk is full), and
# EX_TEMPFAIL: a failure that may clear by itself (a full queue, a disk or a ledger that is
# busy or refuses for now); the supervisor restarts a service that exits with it.
EX_IOERR = 74
EX_TEMPFAIL = 75
# Bad usage (a missing file, an unknown argument): 2, as argparse itself exits on a bad flag,
# so one code means "you asked wrongly" however the mistake was found.
EX_USAGE = 2
# Ctrl-C: 128 + SIGINT, what a shell reports for a process SIGINT ended.
EX_INTERRUPTED = 130


def exit_code(exc: AirlockError) -> int:
    """The exit code of a command that failed with `exc`; every command uses this one table
    (cli.runtime's docstring and docs/cli.md list it): 1 for any other refusal or runtime
    failure."""
    if isinstance(exc, DiskFull):
        return EX_IOERR
    if isinstance(exc, QueueFull):
        return EX_TEMPFAIL
    if isinstance(exc, ConfigError):
        return EX_CONFIG
    if isinstance(exc, UsageError):
        return EX_USAGE
    if isinstance(exc, AlreadyRunning):
        return EX_ALREADY_RUNNING
    return 1
