"""CURVE keys: one pair per role, and which public keys each broker endpoint allows.

    keys/broker.key, broker.key_secret        the broker's pair (its public key is the
                                              "server key" every client must know)
    keys/<role>.key, <role>.key_secret        intake, smtp, supervisor, reader, validator, actor,
                                              dashboard
    keys/allow/<endpoint>/<role>.key          the public keys an endpoint lets in
    keys/services/<service>/                  what one compose container mounts at /keys
    keys/people/<name>.key, <name>.key_secret one pair per person who may approve (the
                                              task's principals): a decision is proven by
                                              this key, which no service holds
    keys/allow/people/<name>.key              the people's public keys, for the broker

Each role may use only its own endpoint: the reader's key is allowed on the reader
endpoint and nowhere else. The intake endpoint lets in four client keys: "intake" (the
CLI's `airlock inject`), "supervisor" (`airlock up`'s supervisor), "dashboard" (the page)
and "smtp" (the SMTP intake, python -m intake). Only the smtp key may vouch for a sender:
the broker keeps a Submit's sender_proof from it alone (smtp_keys), as only the SMTP intake
checks DKIM. Only the supervisor's key may write a supervisor line (a service restarted)
into the trace: the broker knows each key's role (client_roles), and broker.events.WRITES
says what each role may write. No container holds the supervisor's key, and a container's
broker does not let it in: compose, swarm and Kubernetes restart services themselves. A
process needs only its own secret key and the broker's public key (in compose each
container mounts just those).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

from airlock import files
from airlock.errors import ConfigError

SMTP_ROLE = "smtp"  # the SMTP intake's own key: the only one whose sender_proof the broker keeps
SUPERVISOR_ROLE = "supervisor"  # `airlock up`'s own key: the only one that may write supervisor lines
CLIENT_ROLES = ("intake", SMTP_ROLE, SUPERVISOR_ROLE, "reader", "validator", "actor", "dashboard")
# Roles added after key folders were first made: ensure() and add_new_roles() give an older
# folder their pairs, leaving every other key as it was.
NEWER_ROLES = (SMTP_ROLE, SUPERVISOR_ROLE)
ENDPOINT_ALLOWS = {"intake": ("intake", SMTP_ROLE, SUPERVISOR_ROLE, "dashboard"), "reader": ("reader",),
                   "validator": ("validator",), "actor": ("actor",), "trace": ("dashboard",)}
# What each container of the compose lab mounts at /keys: its own secret key only (and the
# broker's public key; the broker gets the allow lists).
SERVICE_KEYS = {"broker": ("broker",), "reader": ("reader",), "validator": ("validator",), "actor": ("actor",),
                "intake": (SMTP_ROLE,), "dashboard": ("dashboard",), "inject": ("intake",)}
# The roles some container holds. The supervisor's is not one: compose, swarm and Kubernetes
# restart services themselves, so the broker they run (services/broker) does not let it in.
CONTAINER_ROLES = frozenset(role for roles in SERVICE_KEYS.values() for role in roles)


class IncompleteKeys(ConfigError):
    """A key folder with only some of the pairs (an interrupted run)."""

    def __init__(self, folder: Path, missing: list[str]) -> None:
        self.folder, self.missing = folder, missing
        super().__init__(self.describe(str(folder)))

    def describe(self, shown: str) -> str:
        return (f"the keys in {shown} are incomplete (missing {', '.join(self.missing)}): "
                "remove that folder and start again to make a new set")


@dataclass(frozen=True)
class Pair:
    public: bytes
    secret: bytes | None


ROLES = ("broker", *CLIENT_ROLES)


def generate(folder: Path, force: bool = False) -> list[Path]:
    """Create every role's key pair and the allow lists; refuse to overwrite unless forced."""
    if (folder / "broker.key_secret").exists() and not force:
        raise ConfigError(f"keys already exist in {folder} (use --force to replace them)")
    files.make_folder(folder)
    made = []
    for role in ROLES:
        made += _write_pair(folder, role)
    derive(folder)
    return made


def _write_pair(folder: Path, role: str) -> list[Path]:
    """One role's new pair in `folder`; returns the two files."""
    made = []
    # zmq writes the pair into a scratch folder of its own (mkdtemp: 0700); each file is
    # then written here 0600 from its first byte and renamed into place (airlock.files).
    with tempfile.TemporaryDirectory() as scratch:
        for path in zmq.auth.create_certificates(scratch, role):
            target = folder / Path(path).name
            files.write_private(target, Path(path).read_bytes())
            made.append(target)
    return made


def ensure(folder: Path) -> str:
    """Make the keys once and keep them after ("made" or "kept..."): what the compose lab's
    init service runs on every `up`. The allow lists and the services' folders are derived
    from the pairs again, so a kept folder also heals. A folder with only some pairs (an
    interrupted run) is refused rather than half replaced: clients may hold the other half.
    A folder made before a role was added (NEWER_ROLES) gets that role's pair: "kept, added smtp"."""
    missing = [f"{role}.{kind}" for role in ROLES for kind in ("key", "key_secret")
               if not (folder / f"{role}.{kind}").is_file()]
    if len(missing) == 2 * len(ROLES):
        generate(folder)
        return "made"
    newer = {f"{role}.{kind}" for role in NEWER_ROLES for kind in ("key", "key_secret")}
    if set(missing) - newer:
        raise IncompleteKeys(folder, missing)
    added = add_new_roles(folder)
    return f"kept, added {', '.join(added)}" if added else "kept"


def add_new_roles(folder: Path) -> list[str]:
    """Give a folder made before NEWER_ROLES existed their pairs, then derive again; returns
    the roles added. A role with half a pair (one file of two) is refused, not replaced: its
    other half may be in use. No pair of another role is touched."""
    added = []
    for role in NEWER_ROLES:
        present = [kind for kind in ("key", "key_secret") if (folder / f"{role}.{kind}").is_file()]
        if len(present) == 1:
            raise IncompleteKeys(folder, [f"{role}.{'key_secret' if present == ['key'] else 'key'}"])
        if not present:
            _write_pair(folder, role)
            added.append(role)
    derive(folder)
    return added


def tighten(folder: Path) -> bool:
    """Close a key folder of this user's that others may enter (an older version made them
    0755) by making it 0700; True if it changed. Another user's folder is left as it is: the
    compose lab's init sets its own modes."""
    info = folder.lstat()
    if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode) or not info.st_mode & 0o077:
        return False
    folder.chmod(files.PRIVATE_FOLDER)
    return True


PEOPLE = "people"  # the folder of people's pairs, and of their public keys under allow/
PERSON_NAME = re.compile(r"[a-z][a-z0-9._-]{0,63}")  # a file name on every system


def person(name: str) -> str:
    """The key name of a person's pair (load(folder, person("dana")) reads people/dana.*)."""
    return f"{PEOPLE}/{name}"


def make_people(folder: Path, names: Collection[str]) -> list[str]:
    """A pair for each person named who has none yet (an existing pair is never replaced:
    its holder would lose their key), then the allow lists again. Returns who got one."""
    bad = [name for name in names if not PERSON_NAME.fullmatch(name)]
    if bad:
        raise ConfigError(f"person names {bad} are not key file names (lower case, digits, . _ -, at most 64)")
    made = sorted(name for name in set(names) if not (folder / PEOPLE / f"{name}.key_secret").is_file())
    files.make_folder(folder / PEOPLE)
    for name in made:
        _write_pair(folder / PEOPLE, name)
    (folder / PEOPLE).chmod(0o700)
    derive(folder)
    return made


def approvers(folder: Path) -> dict[str, str]:
    """Who each person's public key is (z85 text, as the authenticator names a client ->
    name), from allow/people: what the broker checks a decision against."""
    found = {}
    for path in sorted((folder / "allow" / PEOPLE).glob("*.key")):
        found[load(folder / "allow" / PEOPLE, path.stem, secret=False).public.decode()] = path.stem
    return found


def smtp_keys(folder: Path) -> frozenset[str]:
    """The SMTP intake's public key (z85 text, as the authenticator names a client), from
    the intake endpoint's allow list: the only key whose sender_proof the broker keeps. Empty
    when the folder has none (then every proof is recorded as "none")."""
    path = folder / "allow" / "intake" / f"{SMTP_ROLE}.key"
    if not path.is_file():
        return frozenset()
    return frozenset({load(folder / "allow" / "intake", SMTP_ROLE, secret=False).public.decode()})


def client_roles(folder: Path) -> dict[str, str]:
    """Whose each client key is (z85 public key, as the authenticator names a client -> role),
    from the endpoints' allow lists (what the broker holds, in compose too): what the broker
    checks a trace line against (broker.events.WRITES). A key in no allow list is left out,
    and so refused."""
    found = {}
    for endpoint, roles in ENDPOINT_ALLOWS.items():
        for role in roles:
            if (folder / "allow" / endpoint / f"{role}.key").is_file():
                found[load(folder / "allow" / endpoint, role, secret=False).public.decode()] = role
    return found


def principal_names(path: Path) -> list[str]:
    """The names in a principals file (tasks/principals.toml), the people who may decide;
    a file that does not read or parse is a ConfigError naming it."""
    import tomllib

    try:
        return [str(p["name"]) for p in tomllib.loads(path.read_text(encoding="utf-8")).get("principals", [])]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"principals file {path}: {exc}") from None


def derive(folder: Path) -> None:
    """Write the allow lists and each service's folder from the pairs in `folder`, touching
    only files whose content differs and removing any the policy no longer names. A running
    container keeps its bind-mounted folder: nothing is deleted and made again under it."""
    for endpoint, roles in ENDPOINT_ALLOWS.items():
        _sync(folder / "allow" / endpoint, {f"{role}.key": folder / f"{role}.key" for role in roles})
    people = {path.name: path for path in sorted((folder / PEOPLE).glob("*.key"))}
    _sync(folder / "allow" / PEOPLE, people)
    for service, roles in SERVICE_KEYS.items():
        own = folder / "services" / service
        wanted = {"broker.key": folder / "broker.key"}
        wanted |= {f"{role}.key_secret": folder / f"{role}.key_secret" for role in roles}
        _sync(own, wanted, keep={"allow"} if service == "broker" else ())
        if service == "broker":  # a container's broker lets in the keys its fellow containers hold
            for endpoint, roles in ENDPOINT_ALLOWS.items():  # noqa: PLW2901  the broker's allow lists: other roles, on purpose
                _sync(own / "allow" / endpoint,
                      {f"{role}.key": folder / f"{role}.key" for role in roles if role in CONTAINER_ROLES})
            _sync(own / "allow" / PEOPLE, people)
            _sync(own / "allow", {}, keep={*ENDPOINT_ALLOWS, PEOPLE})
    _sync(folder / "allow", {}, keep={*ENDPOINT_ALLOWS, PEOPLE})
    _sync(folder / "services", {}, keep=set(SERVICE_KEYS))


def _sync(target: Path, wanted: dict[str, Path], keep: Collection[str] = ()) -> None:
    """Make `target` hold exactly `wanted` (name -> source file) plus the entries in `keep`."""
    files.make_folder(target)
    for entry in target.iterdir():
        if entry.name not in wanted and entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for name, source in wanted.items():
        path = target / name
        content = source.read_bytes()
        if path.is_symlink() or not path.is_file() or path.read_bytes() != content:
            files.write_private(path, content)  # a secret is never readable by others, not even briefly
        elif name.endswith(".key_secret"):
            path.chmod(files.PRIVATE_FILE)


def load(folder: Path, role: str, *, secret: bool = True) -> Pair:
    """A role's pair (or only its public key), with the file named in any error. A key that
    is not 40 characters of Z85 (32 bytes), or a secret whose public key is not the one
    beside it (a changed character that is still Z85), is a ConfigError: a service stops
    with one line and exit 78, and is not restarted to meet the same file again."""
    path = folder / (f"{role}.key_secret" if secret else f"{role}.key")
    try:
        public, private = zmq.auth.load_certificate(str(path))
    except OSError as exc:
        raise ConfigError(f"CURVE key {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001  pyzmq's parser raises what the text makes it (ValueError, IndexError...)
        raise ConfigError(f"CURVE key {path} does not read as a key file ({type(exc).__name__}: {exc})") from None
    if secret and not private:
        raise ConfigError(f"CURVE key {path} holds no secret key")
    for kind, key in (("public", public), ("secret", private)):
        if key is not None and not _z85_key(key):
            raise ConfigError(f"CURVE key {path}: its {kind} key is not 40 characters of Z85; the file is damaged")
    if private is not None and _public_of(private) != public:
        raise ConfigError(f"CURVE key {path}: its secret key does not give the public key beside it; "
                          "the file is damaged")
    return Pair(public, private)


Z85 = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def _public_of(secret: bytes) -> bytes | None:
    try:
        return zmq.curve_public(secret)
    except (ValueError, zmq.ZMQError):  # Z85 characters whose value does not fit 32 bytes
        return None


def check_allowed(folder: Path) -> None:
    """Every public key file in an allow list reads as a key, or a ConfigError naming the first
    that does not (the authenticator would stop on it with a traceback of its own)."""
    for path in sorted(folder.glob("*.key")):
        load(folder, path.stem, secret=False)


def _z85_key(key: bytes) -> bool:
    """Whether `key` is a CURVE key in Z85: 40 characters of its alphabet (32 bytes)."""
    return len(key) == 40 and Z85.issuperset(key)
