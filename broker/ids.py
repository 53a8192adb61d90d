"""Message ids: `<boot in hex>-<counter>`, never the same twice on one data dir.

Data: the clock at a broker's start; `<data dir>/broker.boot`, the last boot number any
broker took on this data dir (one decimal integer); and the ids the journal holds, with, when
that file is missing or unreadable (a data dir an older broker made), those of the trace's
checkpoint and of the last TAIL_BYTES of the trace and of the call log: a bounded read, as
that trace may be GBs in one file, so ids only deeper in history are not seen.
Readers: the intake (broker.intake) numbers each accepted email `<boot>-<counter>`; the
journal, the trace and the actor's idempotency keys (one per email id and step) key on it.
Rationale: a boot number read off the clock alone repeats when a broker starts at a
millisecond the data dir has seen (a clock stepped back, a box without a clock), and a
repeated id makes a new email look like an old one: the actor finds its steps already in
its ledger and runs no tool. So a start takes the clock's millisecond or the last boot
number plus one, whichever is higher, and it is on disk (written, fsynced, renamed, the
folder fsynced) before the broker reads its first message. A counter restarts at 1 with each
boot, so a boot number never taken before makes every id of that boot new.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from airlock import files, tracefiles

BOOT_FILE = "broker.boot"
TAIL_BYTES = 4 * 1024 * 1024  # read of each file's end for the ids an older broker gave
_ID_FIELD = re.compile(rb'"message_id":"([0-9a-f]{1,16}-[0-9]{1,20})"')


class BootUnsaved(OSError):
    """The boot number could not be made durable: no id may be handed out."""


def boot_path(data_dir: Path) -> Path:
    return data_dir / BOOT_FILE


def clock_ms() -> int:
    """The clock's milliseconds since the epoch (read through `time.time_ns`, as tests set it)."""
    return time.time_ns() // 1_000_000


def boot_of(message_id: str) -> int | None:
    """The boot number in an id this broker made (`<hex>-<counter>`); None for any other."""
    head, dash, tail = message_id.partition("-")
    if not dash or not tail.isdigit():
        return None
    try:
        return int(head, 16)
    except ValueError:
        return None


def last_boot(data_dir: Path) -> int | None:
    """The boot number saved on this data dir, or None (missing, or not a number)."""
    with contextlib.suppress(OSError, ValueError):
        return int(boot_path(data_dir).read_bytes().strip())
    return None


def take_boot(data_dir: Path, seen: Iterable[str] = (), now_ms: int | None = None) -> int:
    """The boot number for a starting broker: above every one this data dir has taken (the
    saved one and any in `seen`, ids the data dir holds), and the clock's when that is
    higher. Saved before it is returned; BootUnsaved if it cannot be."""
    saved = last_boot(data_dir)
    held = [boot for boot in map(boot_of, seen) if boot is not None]
    floor = max([*held, -1 if saved is None else saved])
    boot = max(clock_ms() if now_ms is None else now_ms, floor + 1)
    try:
        files.write_private(boot_path(data_dir), f"{boot}\n".encode())
        files.fsync_folder(data_dir)
    except OSError as exc:
        raise BootUnsaved(exc.errno, f"cannot save the boot number in {boot_path(data_dir)}: {exc}") from exc
    return boot


def held_in_history(trace_path: Path, calls_path: Path) -> Iterator[str]:
    """Ids an older broker gave, for a data dir with no saved boot number: the checkpoint's,
    and those in the last TAIL_BYTES of the live trace, of its newest closed segment and of
    the call log (the actor's ledger, where a repeated id would pass for a replay)."""
    yield from tracefiles.load(trace_path).states
    segments = tracefiles.closed(trace_path)
    for path in (trace_path, *(segment for _, segment in segments[-1:]), calls_path):
        yield from _ids_in_tail(path)


def _ids_in_tail(path: Path) -> Iterator[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - TAIL_BYTES))
            tail = handle.read(TAIL_BYTES)
    except OSError:  # missing (no call log in this data dir), unreadable: nothing to say
        return
    for match in _ID_FIELD.finditer(tail):
        yield match.group(1).decode()
