"""Fixtures for the actor's tests (test_actor, test_gate): actors on a test's own data dir."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from actor.app import Actor, build
from airlock import task as task_module, trace
from airlock.records import Call
from tests.conftest import CATALOG, TASKS


@pytest.fixture
def make_actor(settings, tmp_path: Path) -> Iterator[Callable[..., Actor]]:
    """Build an actor for a task (a file in tasks/ or a path), on a copy of the catalog, or
    on `catalog_text` instead; every actor built is closed after the test."""
    made: list[Actor] = []

    def make(task: str | Path = "order_status.toml", catalog_text: str | None = None) -> Actor:
        # A new actor on the data dir is a restart: the one before has stopped (two live
        # actors cannot share a ledger: the second refuses to start, see test_ledger.py).
        for actor in made:
            actor.close()
        path = tmp_path / f"catalog{len(made)}.toml"
        path.write_text(CATALOG if catalog_text is None else catalog_text)
        made.append(build(msgspec.structs.replace(settings, catalog=path), task_module.load(TASKS / task)))
        return made[-1]

    yield make
    for actor in made:
        actor.close()


@pytest.fixture
def logged_calls(settings) -> Callable[[], list[Call]]:
    """The mock tools' calls.jsonl so far, one record a line (airlock.records.Call)."""

    return lambda: list(trace.read_calls(settings.calls_path))
