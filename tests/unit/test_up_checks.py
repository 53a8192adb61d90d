"""What `airlock up` checks before it starts a child, and the reasons it gives: each one
names the cause and the fix (one stack per data dir, extras, task, model, recordings).
The checks that need real sockets or processes are in tests/integration/test_up.py."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from airlock import extras, keys, locks, settings as settings_module, task as task_module
from airlock.errors import AlreadyRunning, ConfigError, KeysMissing, TaskError
from airlock.terminal import shown
from airlock.wire import Read, Reading, Rejected
from cli import runtime as cli
from ops import preflight, supervisor
from ops.ports import free_ports
from reader import recordings
from reader.app import Reader, not_configured
from reader.model import ModelFailure
from tests.conftest import ROOT, TASKS, airlock_env
from validator.app import Validator

SEED = (ROOT / "samples" / "seed_4411_de.eml").read_bytes()
UNKNOWN = b"Subject: hello\n\nMy order is 123, nothing recorded answers this one."


def not_installed(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """find_spec and import both say `package` is not installed, for this test only. Its
    submodules an earlier test imported go too: an import finds those in sys.modules
    without ever looking at the parent."""
    for name in [n for n in sys.modules if n.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


# --- one stack per data dir ------------------------------------------------------------------

def test_a_held_data_dir_is_refused_naming_the_pid(tmp_path: Path) -> None:
    """While one holder has the data dir, a second is refused with the holder's pid."""
    with locks.one_stack(tmp_path):
        assert (tmp_path / "run" / "up.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(AlreadyRunning, match=rf"pid {os.getpid()}\b.*--data-dir"):
            with locks.one_stack(tmp_path):
                pass
    with locks.one_stack(tmp_path):  # released on exit: the next stack may start
        pass


# --- a data dir others can write (the compose lab's ./airlock-data is the services' too) ----

def someone_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process runs as another uid than the one owning what tmp_path holds."""
    other = os.getuid() + 1
    monkeypatch.setattr(os, "getuid", lambda: other)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file of the host user's a planted link points at (say ~/.bashrc)."""
    path = tmp_path / "bashrc"
    path.write_text("the host user's own\n")
    return path


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    """run/up.lock renamed to a link by whoever else writes the data dir: refused, its target untouched."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "up.lock").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"run/up\.lock"), locks.one_stack(tmp_path):
        pass
    assert outside.read_text() == "the host user's own\n"


def test_a_run_folder_planted_as_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    """run/ itself a link to a folder elsewhere: refused before a file is made there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"run\b.*not a folder of uid"), locks.one_stack(tmp_path):
        pass
    assert not list(elsewhere.iterdir())


def test_a_run_folder_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run/ made by another uid (renamed in by a service): refused, naming the owner."""
    (tmp_path / "run").mkdir()
    someone_else(monkeypatch)
    with pytest.raises(ConfigError, match=rf"owned by uid {os.stat(tmp_path).st_uid}"), locks.one_stack(tmp_path):
        pass


def test_a_pid_file_planted_as_a_link_is_not_followed(tmp_path: Path, outside: Path) -> None:
    """The pid file's temporary name planted as a link: refused, the link's target untouched."""
    (tmp_path / "up.pid.tmp").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"up\.pid\.tmp"):
        supervisor._write_atomically(tmp_path / "up.pid", "123\n")
    assert outside.read_text() == "the host user's own\n"


def test_pid_files_are_written_atomically_in_the_users_folder(tmp_path: Path) -> None:
    """The ordinary case still works: the file holds the text, no temporary is left."""
    supervisor._write_atomically(tmp_path / "up.pid", "123\n")
    assert (tmp_path / "up.pid").read_text() == "123\n" and not (tmp_path / "up.pid.tmp").exists()


def test_a_keys_folder_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    """<data-dir>/keys a link (to keys someone else made): KeysMissing naming it, never used."""
    keys.generate(tmp_path / "theirs")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keys").symlink_to(tmp_path / "theirs")
    with pytest.raises(KeysMissing, match=r"data/keys is not a folder of uid"):
        settings_module.load({"AIRLOCK_DATA_DIR": str(tmp_path / "data")}).keys_folder  # noqa: B018  reading the property is what raises


def test_a_keys_folder_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """<data-dir>/keys owned by another uid: KeysMissing naming the owner, never used."""
    keys.generate(tmp_path / "data" / "keys")
    someone_else(monkeypatch)
    with pytest.raises(KeysMissing, match=r"data/keys is not a folder of uid .* owned by uid"):
        settings_module.load({"AIRLOCK_DATA_DIR": str(tmp_path / "data")}).keys_folder  # noqa: B018  reading the property is what raises


# --- extras and task files -------------------------------------------------------------------

def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's optional module that is not installed: ConfigError with the exact pip command."""
    not_installed(monkeypatch, "uvicorn")
    with pytest.raises(ConfigError, match=r"needs uvicorn, not installed: run pip install -e '\.\[dashboard\]'"):
        extras.require_extra("airlock up --dashboard", ("starlette", "uvicorn"), "dashboard")


def test_up_dashboard_without_the_extra_exits_78_before_any_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`airlock up --dashboard` without starlette: exit 78 naming pip install -e '.[dashboard]',
    and nothing started (no supervisor, no keys, no pid files)."""
    for key, value in airlock_env(tmp_path / "data").items():
        monkeypatch.setenv(key, value)
    not_installed(monkeypatch, "starlette")

    def started(*args: object, **kwargs: object) -> int:
        raise AssertionError("a child was started before the missing extra was reported")

    monkeypatch.setattr(supervisor.Supervisor, "run", started)
    assert cli.main(["up", "--dashboard"]) == 78
    err = capsys.readouterr().err
    assert "pip install -e '.[dashboard]'" in err and "starlette" in err and err.count("\n") == 1
    assert not (tmp_path / "data" / "keys").exists()


def test_dashboard_module_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m dashboard` without starlette says which pip command installs it."""
    from dashboard.__main__ import main

    for key, value in airlock_env(tmp_path / "data").items():
        monkeypatch.setenv(key, value)
    not_installed(monkeypatch, "starlette")
    monkeypatch.delitem(sys.modules, "dashboard.app", raising=False)
    # Should the page start after all, it must not take a port another test or person uses.
    assert main(["--port", str(free_ports(1)[0])]) == 78
    assert "pip install -e '.[dashboard]'" in capsys.readouterr().err


def test_missing_task_file_names_the_path_and_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative task path that is not there: the message names where it looked and --task."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TaskError) as caught:
        task_module.load("tasks/order_status.toml")
    message = str(caught.value)
    assert f"tasks/order_status.toml (from {tmp_path})" in message
    assert "pass --task FILE (or set AIRLOCK_TASK)" in message and str(TASKS) in message


def test_default_task_outside_the_clone_is_the_shipped_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from another folder with no AIRLOCK_TASK, the shipped order task is used (by its
    full path, which the banner prints); inside the clone it stays the relative default."""
    monkeypatch.chdir(tmp_path)
    assert settings_module.load({}).task == TASKS / "order_status.toml"
    monkeypatch.chdir(ROOT)
    assert settings_module.load({}).task == Path("tasks/order_status.toml")


# --- recordings ------------------------------------------------------------------------------

def test_recordings_line_counts_them_and_names_the_file() -> None:
    """The banner's line says how many recorded answers come from which file."""
    task = task_module.load(TASKS / "order_status.toml")
    count = len(recordings.load(task.recordings_path))
    assert count > 0
    assert task_module.describe_recordings(task) == f"{count} recorded answer(s) from {task.recordings_path}"


def test_a_copied_task_file_says_its_recordings_are_missing(tmp_path: Path) -> None:
    """A task copied away from its recordings: the line names the missing file and the key."""
    copy = tmp_path / "order_status.toml"
    shutil.copy(TASKS / "order_status.toml", copy)
    line = task_module.describe_recordings(task_module.load(copy))
    assert line.startswith(f"none: {tmp_path.parent / 'samples' / 'recorded' / 'order_status.jsonl'} does not exist")
    assert "reader.recordings" in line and "no email gets an answer" in line


# --- the model -------------------------------------------------------------------------------

@pytest.mark.parametrize(("base", "models"), [
    ("http://m:8080", "http://m:8080/v1/models"), ("http://m:8080/v1/", "http://m:8080/v1/models"),
    ("http://m/v1/chat/completions", "http://m/v1/models"),
])
def test_models_url_sits_beside_the_chat_endpoint(base: str, models: str) -> None:
    """The probe asks the model list next to the chat endpoint the reader will call."""
    assert preflight.models_url(base) == models


@pytest.mark.parametrize(("base", "root"), [
    ("http://m:8080", "http://m:8080"), ("http://m:8080/v1/", "http://m:8080"),
    ("http://m/v1/chat/completions", "http://m"), ("http://m/llm/v1", "http://m/llm"),
])
def test_the_model_servers_root_is_where_props_are(base: str, root: str) -> None:
    assert settings_module.model_server_root(base) == root


def test_no_answer_reason_says_model_and_recording() -> None:
    """No model answer and no recording: the rejection names the model's failure and the
    missing recording, not only that the answer is empty."""
    task = task_module.load(TASKS / "order_status.toml")
    url = "http://127.0.0.1:9"  # only named in the reason: no socket is opened
    reader = Reader(task, lambda messages: ModelFailure("refused", f"connection refused at {url}"),
                    recordings.load(task.recordings_path), url)
    (reading,) = reader.handle(Read(message_id="m", raw=UNKNOWN, format="eml"))
    assert isinstance(reading, Reading) and reading.source == "none"
    (rejected,) = Validator(task.value).handle(reading)
    assert isinstance(rejected, Rejected)
    assert rejected.reason == (f"there is no answer: the model at {url} did not answer (refused: connection "
                               f"refused at {url}), and there is no recording for this email")
    (recorded,) = reader.handle(Read(message_id="m", raw=SEED, format="eml"))
    assert isinstance(recorded, Reading) and recorded.source == "recorded" and recorded.no_answer_because == ""


def test_no_model_set_and_no_recording_says_so() -> None:
    """With no model URL at all, the reason says none is set and how to set one."""
    task = task_module.load(TASKS / "order_status.toml")
    (reading,) = Reader(task, not_configured, {}).handle(Read(message_id="m", raw=UNKNOWN, format="eml"))
    assert isinstance(reading, Reading)
    assert reading.no_answer_because == ("no model is set (airlock up --model-url URL, or AIRLOCK_MODEL_URL), "
                                         "and there is no recording for this email")


def test_an_unwritable_data_dir_is_a_config_error(tmp_path: Path) -> None:
    """A data dir up cannot write its lock in: ConfigError naming the file, not a traceback."""
    (tmp_path / "run").write_text("a file where the run folder should be")
    with pytest.raises(ConfigError, match=r"cannot lock .*run/up\.lock"), locks.one_stack(tmp_path):
        pass


def test_no_answer_reason_keeps_a_model_servers_words_short_and_visible() -> None:
    """A model server's HTTP reason phrase in the no-answer reason is cut and its control
    characters shown as escapes, so neither a terminal nor the trace gets them raw."""
    task = task_module.load(TASKS / "order_status.toml")
    hostile = "HTTP 500 \x1b[2J\u202e" + "x" * 5000
    reader = Reader(task, lambda messages: ModelFailure("http_error", hostile), {}, "http://m")
    (reading,) = reader.handle(Read(message_id="m", raw=UNKNOWN, format="eml"))
    assert isinstance(reading, Reading)
    assert "\x1b" not in reading.no_answer_because and "\u202e" not in reading.no_answer_because
    assert shown("\x1b[2J\u202e") in reading.no_answer_because and len(reading.no_answer_because) < 400
