"""A small tmpfs of a test's own: a real full disk, ENOSPC from the kernel through whatever
buffering the code under test does. Root only (mount(8)); the test is skipped otherwise."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def own_tmpfs(tmp_path: Path, options: str, must_be_idle: bool = False) -> Iterator[Path]:
    """`tmp_path/disk` mounted as a tmpfs with `options` (e.g. "size=2m") while the block
    runs, always unmounted after it. `must_be_idle`: a tmpfs still in use at the end (a file
    the test opened and did not close) fails the test, after a lazy unmount."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        if not must_be_idle:
            subprocess.run(["umount", "-l", str(disk)], check=True)
        elif subprocess.run(["umount", str(disk)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)  # never left behind...
            pytest.fail("the tmpfs was still in use: something the test opened was not closed")  # ...but said
