"""Message ids on one data dir never repeat, whatever the clock says at a broker's start."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from airlock import settings as settings_module
from airlock.wire import Accepted
from tests.conftest import airlock_env
from tests.integration.test_disk_full import Intake

STUCK_CLOCK_NS = 1_700_000_000_000 * 1_000_000  # one millisecond, at every start


def _accepted_ids(settings: settings_module.Settings, count: int) -> list[str]:
    """Start a broker in this process, submit `count` emails, stop it: the ids it gave."""
    from broker.app import serve

    stop = threading.Event()
    broker = threading.Thread(target=serve, args=(settings, None, stop), daemon=True)
    broker.start()
    intake = Intake(str(settings.ports["intake"]))
    try:
        replies = intake.submit(count)
    finally:
        intake.close()
        stop.set()
        broker.join(20)
    assert not broker.is_alive()
    assert [type(reply) for reply in replies] == [Accepted] * count, replies
    return [reply.message_id for reply in replies if isinstance(reply, Accepted)]


def test_a_broker_started_at_a_millisecond_the_data_dir_has_seen_gives_new_ids(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three starts on one stuck clock (a box without a clock, a clock stepped back): no id twice."""
    monkeypatch.setattr(time, "time_ns", lambda: STUCK_CLOCK_NS)
    settings = settings_module.load({**airlock_env(tmp_path / "data"), "AIRLOCK_INSECURE": "1"})
    given = [_accepted_ids(settings, 3) for _ in range(3)]
    every = [message_id for ids in given for message_id in ids]
    assert len(set(every)) == len(every), given


def test_a_clock_stepped_back_gives_ids_never_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start an hour before the last one (the clock stepped back) still gives unseen ids."""
    settings = settings_module.load({**airlock_env(tmp_path / "data"), "AIRLOCK_INSECURE": "1"})
    monkeypatch.setattr(time, "time_ns", lambda: STUCK_CLOCK_NS)
    first = _accepted_ids(settings, 2)
    monkeypatch.setattr(time, "time_ns", lambda: STUCK_CLOCK_NS - 3600 * 10**9)
    earlier = _accepted_ids(settings, 2)
    monkeypatch.setattr(time, "time_ns", lambda: STUCK_CLOCK_NS)
    again = _accepted_ids(settings, 2)
    every = first + earlier + again
    assert len(set(every)) == len(every), (first, earlier, again)


def test_a_data_dir_without_a_saved_boot_number_still_gives_unseen_ids(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """broker.boot gone (a data dir an older broker made): the ids the data dir holds are the floor."""
    from broker import ids

    monkeypatch.setattr(time, "time_ns", lambda: STUCK_CLOCK_NS)
    settings = settings_module.load({**airlock_env(tmp_path / "data"), "AIRLOCK_INSECURE": "1"})
    first = _accepted_ids(settings, 2)
    ids.boot_path(settings.data_dir).unlink()
    again = _accepted_ids(settings, 2)
    assert not set(first) & set(again), (first, again)
