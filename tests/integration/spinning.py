"""A key source that never answers in time, in a module of its own: each sender check's child
process imports it to unpickle the verifier, and this costs it no more than the import."""

from __future__ import annotations

import time

from intake.authentication import KeyFile

SPIN_S = 60


class SpinningKeys(KeyFile):
    """Spins the CPU for a minute on `evil.example` (a stand-in for any check that costs more
    than its budget) and answers at once for the other domains."""

    def __call__(self, name: bytes, timeout: float = 5) -> bytes | None:
        if name.rstrip(b".").endswith(b"evil.example"):
            deadline = time.monotonic() + SPIN_S
            while time.monotonic() < deadline:
                pass
        return super().__call__(name, timeout)
