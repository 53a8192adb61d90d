"""Email files from the command line: .eml, .txt, folders of them, or standard input."""

from __future__ import annotations

import email.policy
import email.utils
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from airlock import mailbounds, senders
from airlock.errors import EmailTooLarge, LinkOutside, UsageError
from airlock.wire import EmailFormat

SUFFIXES: dict[str, EmailFormat] = {".eml": "eml", ".txt": "text"}
MAX_FILE_BYTES = 4 * 1024 * 1024  # the largest frame airlock accepts; the broker's own limit is lower
_HEADER = re.compile(rb"\A(?:[A-Za-z][A-Za-z0-9-]*:[^\n]*\r?\n)+")


def format_of(path: Path) -> EmailFormat:
    return SUFFIXES.get(path.suffix.lower(), "text")


def sniff(raw: bytes) -> EmailFormat:
    """Standard input has no name: it is an .eml if it starts with header lines."""
    return "eml" if _HEADER.match(raw) else "text"


def expand(paths: list[str]) -> Iterator[Path]:
    """Each file as given; each folder's .eml and .txt files, sorted, recursively."""
    for path, _ in listed(paths):
        yield path


def listed(paths: list[str]) -> Iterator[tuple[Path, Path | None]]:
    """(file, the folder it was found in, resolved; None for a file named as such), every
    folder checked whole before its first file: a link in it, to a file or a folder, is
    followed only while its target stays inside the folder, else LinkOutside naming it. A
    folder of emails from elsewhere must not send a file of its author's choosing (a key,
    ~/.netrc) to the model and the trace. A file named on the command line is the user's
    own choice, a link or not; a linked folder inside is listed, never entered twice."""
    for name in paths:
        path = Path(name)
        if path.is_dir():
            root = path.resolve()
            found = []
            for here, folders, files in os.walk(path):  # followlinks=False: links are checked, not walked
                for entry in (Path(here, n) for n in (*folders, *files)):
                    # realpath, not resolve(): a link loop must be refused or skipped, not raise
                    if entry.is_symlink() and not _within(Path(os.path.realpath(entry)), root):
                        raise _outside(entry, path)
                found += [Path(here, n) for n in files
                          if Path(n).suffix.lower() in SUFFIXES and Path(here, n).is_file()]
            yield from ((file, root) for file in sorted(found))
        elif path.is_file():
            yield path, None
        else:
            raise UsageError(f"no such file or folder: {name}")


def emails(paths: list[str], limit: int = MAX_FILE_BYTES, setting: str = "") -> Iterator[tuple[Path, bytes]]:
    """Each file of listed() with its bytes. The file found in a folder is checked again
    once open (where the descriptor really leads), so a link swapped in after the listing
    is refused too, not read."""
    for path, root in listed(paths):
        yield path, read(path, limit, setting, root)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _outside(link: Path, folder: Path | str) -> LinkOutside:
    return LinkOutside(f"{link} is a link to {os.path.realpath(link)}, outside {folder}: not read "
                       "(copy the file into the folder if you mean to send it)")


_ADDRESS = re.compile(r"\A[^@\s<>]{1,64}@[^@\s<>]{1,255}\Z")


def sender_of(raw: bytes, fmt: EmailFormat) -> str:
    """The From address of an .eml in its exact form (airlock/senders.py; '' if none).

    Structural parsing only, by trusted code: the reader and the model never choose it.
    It is the sender's claim: without the SMTP intake's proof it stays unverified. Read
    within the reader's bounds (airlock.mailbounds): an email past them vouches for no one.
    """
    if fmt != "eml":
        return ""
    try:
        headers = mailbounds.parse(raw, email.policy.compat32, headersonly=True)
        if isinstance(headers, mailbounds.Exceeded):
            return ""
        address = senders.normalized(email.utils.parseaddr(str(headers.get("From", "")))[1]) or ""
    except Exception:  # noqa: BLE001  a header the parser cannot read vouches for no one
        return ""
    return address if _ADDRESS.match(address) else ""


def too_large(name: str, size: str, limit: int, setting: str = "") -> EmailTooLarge:
    """The refusal of an email over `limit`, one wording for files, --text and stdin (the
    setting that sets the limit is named, so the user knows what to change)."""
    return EmailTooLarge(f"{name} is {size} bytes; the limit is {limit}" + (f" ({setting})" if setting else ""))


def read(path: Path, limit: int = MAX_FILE_BYTES, setting: str = "", root: Path | None = None) -> bytes:
    """The file's bytes, or EmailTooLarge before reading one over `limit`; with `root`, a
    file that turns out (once open) to lie outside that folder is LinkOutside instead."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a fifo swapped in does not hang
    with os.fdopen(descriptor, "rb") as file:
        opened = _opened(descriptor)
        if root is not None and opened is not None and not _within(opened, root):
            raise _outside(path, root)
        size = os.fstat(descriptor).st_size
        raw = file.read(limit + 1) if size <= limit else b""
        if size > limit or len(raw) > limit:  # a file that grew since fstat is held to the limit too
            raise too_large(str(path), str(max(size, len(raw))), limit, setting)
        return raw


def _opened(descriptor: int) -> Path | None:
    """The path an open descriptor leads to (Linux's /proc), or None where that is unknown."""
    where = f"/proc/self/fd/{descriptor}"
    return Path(os.readlink(where)) if os.path.islink(where) else None


def read_stream(stream: BinaryIO, limit: int, setting: str = "", name: str = "standard input") -> bytes:
    """At most `limit` bytes from a stream of unknown length; one byte more is refused, and
    the rest is never read, so a huge or endless input costs no more memory than the limit."""
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise too_large(name, f"over {limit}", limit, setting)
    return raw
