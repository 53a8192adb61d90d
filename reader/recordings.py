"""Recorded model answers: earlier real answers, keyed by the digest of prompt and email.

Used only when the live model does not answer, and always marked source=recorded. A prompt
with no recording gets no answer at all (source=none): the reader never makes one up.
"""

from __future__ import annotations

from pathlib import Path

import msgspec


class Recording(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    digest: str
    answer: str
    model: str
    recorded_at: str
    origin: str = ""


def load(path: Path | None) -> dict[str, Recording]:
    """Recordings by digest; a missing file is an empty set, a bad line is skipped."""
    if path is None or not path.exists():
        return {}
    decoder = msgspec.json.Decoder(Recording)
    found: dict[str, Recording] = {}
    for line in path.read_bytes().splitlines():
        try:
            recording = decoder.decode(line)
        except msgspec.DecodeError:
            continue
        found[recording.digest] = recording
    return found


def save(path: Path, recordings: dict[str, Recording]) -> None:
    """Write all recordings, sorted by origin then digest, so diffs stay readable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = sorted(recordings.values(), key=lambda r: (r.origin, r.digest))
    encoder = msgspec.json.Encoder()
    path.write_bytes(b"".join(encoder.encode(r) + b"\n" for r in ordered))
