"""Environment -> typed settings, read once at start.

Every setting is an AIRLOCK_* variable with a default, except where a default would be a
guess. A value that does not cast raises SettingsError naming the key. Tests and the CLI
pass their own mapping instead of os.environ. Timing settings carry their unit in the name.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from airlock import bindhosts
from airlock.errors import KeysMissing, SettingsError
from airlock.plugs import Plug, parse_plug
from airlock.task import SHIPPED_TASKS

# What a port already in use means, said by the start-up check and by the broker alike.
PORT_IN_USE_HINT = "another airlock up or another program listens there; stop it or choose another port"

DEFAULT_PORTS = {"intake": 7401, "reader": 7402, "validator": 7403, "actor": 7404, "trace": 7405}
LAB_KEYS_FOLDER = "airlock-keys"  # the compose lab's keys, beside its data folder (compose.yaml)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    data_dir: Path
    task: Path
    model_url: str | None
    model_name: str
    model_timeout_s: float
    # Constrained decoding, for a task whose `[reader] constrain` is "type" or "email"
    # (reader/constraint.py): auto (a grammar to llama.cpp's server, nothing to others), gbnf,
    # json_schema or none.
    model_constraint: str
    # Where the broker binds each endpoint (one network each in the lab): an address,
    # subnet:CIDR (its own address in that subnet), default-route (its address where a
    # swarm's published ports arrive), or several, comma-separated (airlock/bindhosts.py).
    bind_hosts: dict[str, str]
    broker_host: str  # where services and the CLI find the broker
    ports: dict[str, int]
    max_email_bytes: int
    max_frame_bytes: int
    read_deadline_s: float  # a reader must answer within this, or the email fails
    validate_deadline_s: float
    act_deadline_s: float
    reader_credit: int  # messages a reader may hold at once (see load)
    worker_credit: int  # messages the validator or actor may hold at once
    max_result_bytes: int  # a tool result larger than this is a typed error, not an observation
    catalog: Path | None  # the actor's tool catalog; None: the one shipped with the actor
    heartbeat_interval_s: float  # broker and workers each say "alive" this often...
    heartbeat_liveness: int  # ...and a peer silent for this many intervals is dead
    reconnect_backoff_max_s: float  # a worker's reconnect delay doubles up to this cap
    max_attempts: int  # deliveries of one email to one stage before it ends failed
    restart_backoff_max_s: float  # `airlock up` restarts a dead child after a delay doubling to this
    keys: Path | None  # CURVE keys (airlock keys); None: looked for (keys_folder)
    insecure: bool  # the broker may serve without CURVE when it finds no keys (never by default)
    student_code: Plug | None  # a lab: the student's file in one service's place (studentcode.student)
    student_timeout_s: float  # one call of the student's function, after which it is stopped
    # The broker's memory under hostile load is bounded in bytes, not counts:
    queue_max_bytes: int  # raw email bytes the broker holds before a reader has read them
    await_max_ids: int  # ids one Await may name
    await_max_waiters: int  # ids one client may wait on at once
    journal_compact_bytes: int  # a journal this big is rewritten without final emails
    queue_full_wait_s: float  # a client resends what a full queue refused for this long, then gives up
    no_worker_wait_s: float  # an email waiting this long for a stage with no worker connected ends failed; 0: never
    # The trace is closed into segments by size, so a restart reads a checkpoint and the
    # live segment, never all of history (airlock.tracefiles):
    trace_segment_bytes: int  # the live trace.jsonl is closed into a segment at this size
    trace_keep_segments: int  # closed segments kept (oldest deleted beyond); 0: all kept

    def endpoint(self, name: str) -> str:
        """Where a client connects for `name`."""
        return f"tcp://{self.broker_host}:{self.ports[name]}"

    def bind_endpoints(self, name: str) -> list[str]:
        """Where the broker listens for `name`: one endpoint per bind host (airlock/bindhosts.py)."""
        return [f"tcp://{host}:{self.ports[name]}" for host in bindhosts.hosts(self.bind_hosts[name])]

    def with_bind_hosts_resolved(self, addresses: Iterable[bindhosts.Address] | None = None) -> Settings:
        """These settings with every `subnet:CIDR` and `default-route` bind host replaced by
        this host's one address there (airlock/bindhosts.py): the broker's first step, before any bind."""
        return msgspec.structs.replace(self, bind_hosts=bindhosts.resolve(self.bind_hosts, addresses))

    @property
    def trace_path(self) -> Path:
        return self.data_dir / "trace.jsonl"

    @property
    def keys_folder(self) -> Path | None:
        """Where this process finds its CURVE keys, looked up now (a client started before
        the stack finds them when it connects again). The first of:

        1. AIRLOCK_KEYS, when set;
        2. the compose lab's key folder beside the data dir (<data-dir>/../airlock-keys,
           which the lab's init service made): in the repository after `docker compose up`
           the host CLI needs no export. It wins over (3) because an `airlock up` run there
           before leaves keys in the data dir that the lab's broker does not know;
        3. the keys `airlock up` made in the data dir (<data-dir>/keys);

        else None. A folder counts only once it holds the broker's public key. One this user
        cannot look into (another user's ./airlock-keys, 0700) is KeysMissing saying so."""
        if self.keys is not None:
            return self.keys
        lab, made_by_up = self.key_folders_looked_in
        if holds(lab, "broker.key"):
            return lab
        _require_own_or_absent(made_by_up)  # it sits in a data dir others may write
        if holds(made_by_up, "broker.key"):
            return made_by_up
        return None

    @property
    def key_folders_looked_in(self) -> tuple[Path, ...]:
        """(2) and (3) of keys_folder, in order: what a "no keys" message names."""
        return (self.data_dir.parent / LAB_KEYS_FOLDER, self.data_dir / "keys")

    @property
    def calls_path(self) -> Path:
        return self.data_dir / "calls.jsonl"


def holds(folder: Path, name: str) -> bool:
    """Whether `folder` holds the file `name`; KeysMissing, not a PermissionError, when this
    user may not look: the CLI reports AirlockErrors in one line, other errors as tracebacks."""
    try:
        return (folder / name).exists()
    except OSError as exc:
        raise KeysMissing(f"{folder} is not readable by uid {os.getuid()} ({exc.strerror}), so no keys there can be "
                          "used: run as the user who owns it, or set AIRLOCK_KEYS to keys of your own") from None


def _require_own_or_absent(folder: Path) -> None:
    """KeysMissing unless `folder` is absent or a folder (not a link) of this user's. The
    compose lab's ./airlock-data belongs to the services' user, who could otherwise put
    keys of its choosing (or a link) where `airlock up` looks for its own, or makes them."""
    try:
        info = folder.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise KeysMissing(f"{folder} is not readable by uid {os.getuid()} ({exc.strerror})") from None
    if not stat.S_ISDIR(info.st_mode):
        why = "a link, or not a folder"
    elif info.st_uid != os.getuid():
        why = f"owned by uid {info.st_uid}"
    else:
        return
    raise KeysMissing(f"{folder} is not a folder of uid {os.getuid()}: {why}; its keys are not used "
                      "(remove it if you did not make it)")


def positive(cast: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = cast(text)
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    return parse


def model_api_url(base: str, resource: str) -> str:
    """The OpenAI-compatible `resource` ("chat/completions", "models") of the model URL a user
    gave: the server, its /v1, or the chat endpoint itself (then its siblings sit beside it).
    One rule for the reader's requests and the start-up probe."""
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        return f"{base.removesuffix('/chat/completions')}/{resource}"
    return f"{base}/{resource}" if base.endswith("/v1") else f"{base}/v1/{resource}"


def model_server_root(base: str) -> str:
    """The server a model URL names, without /v1 or /v1/chat/completions: where llama.cpp's
    server answers /props (how many requests it serves at once)."""
    return model_api_url(base, "").removesuffix("/").removesuffix("/v1")


def switch(text: str) -> bool:
    """An on/off setting: 1/true/yes/on or 0/false/no/off (or empty), nothing else."""
    word = text.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("", "0", "false", "no", "off"):
        return False
    raise ValueError("must be 1 or 0")


def non_negative(cast: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = cast(text)
        if not value >= 0:  # NaN too
            raise ValueError("must be 0 or more")
        return value

    return parse


MODEL_CONSTRAINTS = ("auto", "gbnf", "json_schema", "none")


def one_of(words: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        word = text.strip().lower()
        if word not in words:
            raise ValueError("must be one of " + ", ".join(words))
        return word

    return parse


def port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise ValueError("must be a TCP port 1-65535")
    return value


def optional_url(text: str) -> str | None:
    text = text.strip()
    if not text:
        return None
    if not text.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return text


def reader(env: Mapping[str, str]) -> Callable[[str, Callable[[str], Any], str], Any]:
    """read(key, cast, default): the cast value, or SettingsError naming the key. Other
    processes (the SMTP intake, the dashboard) read their own keys with it."""

    def read(key: str, cast: Callable[[str], Any], default: str) -> Any:
        text = env.get(key, default)
        try:
            return cast(text)
        except (ValueError, TypeError) as exc:
            raise SettingsError(f"setting {key}={text!r} is invalid: {exc}") from None

    return read


def default_task() -> str:
    """tasks/order_status.toml in this folder, else the one shipped beside the code (run
    from outside a clone or editable install), else the relative path, whose load then
    fails naming --task. The banner prints the task it took."""
    here = Path("tasks/order_status.toml")
    shipped = SHIPPED_TASKS / here.name
    return str(here if here.exists() or not shipped.is_file() else shipped)


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build Settings from `env` (default os.environ); keyword overrides win (CLI flags)."""
    env = os.environ if env is None else env
    read = reader(env)
    model_url = read("AIRLOCK_MODEL_URL", optional_url, "")
    values: dict[str, Any] = {
        "data_dir": read("AIRLOCK_DATA_DIR", Path, "airlock-data"),
        "task": read("AIRLOCK_TASK", Path, default_task()),
        "model_url": model_url,
        "model_name": read("AIRLOCK_MODEL_NAME", str, "smollm2"),
        "model_timeout_s": read("AIRLOCK_MODEL_TIMEOUT_S", positive(float), "10"),
        "model_constraint": read("AIRLOCK_MODEL_CONSTRAINT", one_of(MODEL_CONSTRAINTS), "auto"),
        "bind_hosts": {
            name: read(f"AIRLOCK_{name.upper()}_BIND_HOST", bindhosts.parse,
                       env.get("AIRLOCK_BIND_HOST", "127.0.0.1"))
            for name in DEFAULT_PORTS
        },
        "broker_host": read("AIRLOCK_BROKER_HOST", str, "127.0.0.1"),
        "ports": {
            name: read(f"AIRLOCK_{name.upper()}_PORT", port, str(default_port))
            for name, default_port in DEFAULT_PORTS.items()
        },
        "max_email_bytes": read("AIRLOCK_MAX_EMAIL_BYTES", positive(int), str(256 * 1024)),
        "max_frame_bytes": read("AIRLOCK_MAX_FRAME_BYTES", positive(int), str(4 * 1024 * 1024)),
        "read_deadline_s": read("AIRLOCK_READ_DEADLINE_S", positive(float), "60"),
        "validate_deadline_s": read("AIRLOCK_VALIDATE_DEADLINE_S", positive(float), "10"),
        "act_deadline_s": read("AIRLOCK_ACT_DEADLINE_S", positive(float), "30"),
        # A reader that asks a model holds one email at a time: the model call is the slow
        # part, and another reader may take the next email meanwhile. One that answers from
        # recordings is as quick as any worker and would only idle between round trips.
        "reader_credit": read("AIRLOCK_READER_CREDIT", positive(int), "1" if model_url else "64"),
        "worker_credit": read("AIRLOCK_WORKER_CREDIT", positive(int), "64"),
        "max_result_bytes": read("AIRLOCK_MAX_RESULT_BYTES", positive(int), str(64 * 1024)),
        "catalog": read("AIRLOCK_CATALOG", lambda text: Path(text) if text else None, ""),
        "heartbeat_interval_s": read("AIRLOCK_HEARTBEAT_INTERVAL_S", positive(float), "1.0"),
        "heartbeat_liveness": read("AIRLOCK_HEARTBEAT_LIVENESS", positive(int), "3"),
        "reconnect_backoff_max_s": read("AIRLOCK_RECONNECT_BACKOFF_MAX_S", positive(float), "8"),
        # Each redelivery goes alone to a worker holding nothing (broker.dispatch), so an email
        # that kills or stalls every worker it reaches ends `failed` after this many.
        "max_attempts": read("AIRLOCK_MAX_ATTEMPTS", positive(int), "3"),
        "restart_backoff_max_s": read("AIRLOCK_RESTART_BACKOFF_MAX_S", positive(float), "10"),
        "keys": read("AIRLOCK_KEYS", lambda text: Path(text) if text else None, ""),
        "insecure": read("AIRLOCK_INSECURE", switch, "0"),
        "student_code": read("AIRLOCK_STUDENT_CODE", parse_plug, ""),
        "student_timeout_s": read("AIRLOCK_STUDENT_TIMEOUT_S", positive(float), "2"),
        "queue_max_bytes": read("AIRLOCK_QUEUE_MAX_BYTES", positive(int), str(64 * 1024 * 1024)),
        "await_max_ids": read("AIRLOCK_AWAIT_MAX_IDS", positive(int), "1000"),
        "await_max_waiters": read("AIRLOCK_AWAIT_MAX_WAITERS", positive(int), "100000"),
        # 16 MiB: the broker keeps each journalled email's size in memory until a compaction
        # drops the final ones, so this bounds that index (about 35,000 emails), and a
        # compaction (a copy of what is live, a few records) costs tens of milliseconds.
        "journal_compact_bytes": read("AIRLOCK_JOURNAL_COMPACT_BYTES", positive(int), str(16 * 1024 * 1024)),
        "queue_full_wait_s": read("AIRLOCK_QUEUE_FULL_WAIT_S", positive(float), "30"),
        # A stage with no worker connected (a killed actor no one restarts) would hold its
        # emails with no deadline and no outcome: they end `failed` after this wait instead.
        "no_worker_wait_s": read("AIRLOCK_NO_WORKER_WAIT_S", non_negative(float), "300"),
        "trace_segment_bytes": read("AIRLOCK_TRACE_SEGMENT_BYTES", positive(int), str(64 * 1024 * 1024)),
        "trace_keep_segments": read("AIRLOCK_TRACE_KEEP_SEGMENTS", non_negative(int), "0"),
    }
    for key, value in overrides.items():
        if key not in values:
            raise SettingsError(f"unknown setting override {key!r}")
        if value is not None:
            values[key] = value
    return Settings(**values)
