"""Email files from the command line: .eml, .txt, folders of them, or standard input."""

from __future__ import annotations

import email.policy
import email.utils
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from airlock import mailbounds
from airlock.errors import EmailTooLarge, UsageError
from airlock.wire import EmailFormat

SUFFIXES = {".eml": "eml", ".txt": "text"}
MAX_FILE_BYTES = 4 * 1024 * 1024  # the largest frame airlock accepts; the broker's own limit is lower
_HEADER = re.compile(rb"\A(?:[A-Za-z][A-Za-z0-9-]*:[^\n]*\r?\n)+")


def format_of(path: Path) -> EmailFormat:
    return SUFFIXES.get(path.suffix.lower(), "text")  # type: ignore[return-value]


def sniff(raw: bytes) -> EmailFormat:
    """Standard input has no name: it is an .eml if it starts with header lines."""
    return "eml" if _HEADER.match(raw) else "text"


def expand(paths: list[str]) -> Iterator[Path]:
    """Each file as given; each folder's .eml and .txt files, sorted, recursively."""
    for name in paths:
        path = Path(name)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file())
        elif path.is_file():
            yield path
        else:
            raise UsageError(f"no such file or folder: {name}")


_ADDRESS = re.compile(r"\A[^@\s<>]{1,64}@[^@\s<>]{1,255}\Z")


def sender_of(raw: bytes, fmt: EmailFormat) -> str:
    """The From address of an .eml, as the injecting client vouches for it ('' if none).

    Structural parsing only, by trusted code: the reader and the model never choose it.
    Within the reader's bounds (airlock.mailbounds): an email past them vouches for no one.
    """
    if fmt != "eml":
        return ""
    try:
        headers = mailbounds.parse(raw, email.policy.compat32, headersonly=True)
        if isinstance(headers, mailbounds.Exceeded):
            return ""
        address = email.utils.parseaddr(str(headers.get("From", "")))[1].strip().lower()
    except Exception:  # a header the parser cannot read vouches for no one
        return ""
    return address if _ADDRESS.match(address) else ""


def too_large(name: str, size: str, limit: int, setting: str = "") -> EmailTooLarge:
    """The refusal of an email over `limit`, one wording for files, --text and stdin (the
    setting that sets the limit is named, so the user knows what to change)."""
    return EmailTooLarge(f"{name} is {size} bytes; the limit is {limit}" + (f" ({setting})" if setting else ""))


def read(path: Path, limit: int = MAX_FILE_BYTES, setting: str = "") -> bytes:
    """The file's bytes, or EmailTooLarge before reading one over `limit`."""
    size = path.stat().st_size
    if size > limit:
        raise too_large(str(path), str(size), limit, setting)
    return path.read_bytes()


def read_stream(stream: BinaryIO, limit: int, setting: str = "", name: str = "standard input") -> bytes:
    """At most `limit` bytes from a stream of unknown length; one byte more is refused, and
    the rest is never read, so a huge or endless input costs no more memory than the limit."""
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise too_large(name, f"over {limit}", limit, setting)
    return raw
