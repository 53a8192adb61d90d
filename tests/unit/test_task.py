"""Task files and settings: strict loading that fails closed and names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock import settings as settings_module, task as task_module
from airlock.errors import SettingsError, TaskError
from airlock.task import Choice, Digits

ROOT = Path(__file__).resolve().parents[2]
ORDER = (ROOT / "tasks" / "order_status.toml").read_text()


@pytest.mark.parametrize("name", ["order_status.toml", "refund_request.toml"])
def test_shipped_tasks_load(name: str) -> None:
    """Both shipped tasks load and name their recordings."""
    loaded = task_module.load(ROOT / "tasks" / name)
    assert loaded.recordings_path is not None and loaded.recordings_path.exists()


def test_order_status_is_the_seed_task() -> None:
    """1-6 digits, then exactly shop/lookup_order and mail/send_status."""
    loaded = task_module.load(ROOT / "tasks" / "order_status.toml")
    assert loaded.value == Digits(max_length=6, grounded=True)
    assert [step.call for step in loaded.plan] == ["shop/lookup_order", "mail/send_status"]


def test_refund_task_is_a_choice() -> None:
    """The second task uses another narrow type with no code of its own."""
    loaded = task_module.load(ROOT / "tasks" / "refund_request.toml")
    assert isinstance(loaded.value, Choice)


BROKEN = [
    pytest.param(ORDER + "\nsurprise = 1\n", "surprise", id="unknown-top-key"),
    pytest.param(ORDER.replace('type = "digits"', 'type = "anything"'), "value", id="unknown-type"),
    pytest.param(ORDER.replace("max_length = 6", "max_length = 0"), "max_length", id="zero-length"),
    pytest.param(ORDER.replace('call = "shop/lookup_order"', 'call = "lookup_order"'), "server/tool",
                 id="bare-tool-name"),
    pytest.param(ORDER.replace('call = "shop/lookup_order"', 'call = "Shop/Lookup"'), "server/tool", id="not-an-id"),
    pytest.param(ORDER.replace("max_length = 6", 'max_length = "6"'), "max_length", id="string-for-int"),
    pytest.param("name = 'x'\n[reader]\ninstruction='i'\n[value]\ntype='integer'\nmin=5\nmax=1\n[[plan]]\ncall='a/b'\n",
                 "min", id="empty-range"),
    pytest.param("name = 'x'\n[reader]\ninstruction='i'\n[value]\ntype='choice'\nchoices=['a','a']\n"
                 "[[plan]]\ncall='a/b'\n", "duplicates", id="duplicate-choices"),
    pytest.param("name = 'x'\n[reader]\ninstruction='i'\n[value]\ntype='digits'\nmax_length=3\nplan=[]\n",
                 "plan", id="empty-plan"),
    pytest.param("this is = not toml [", "cannot be read", id="not-toml"),
]


@pytest.mark.parametrize(("text", "mentions"), BROKEN)
def test_bad_task_files_fail_closed(tmp_path: Path, text: str, mentions: str) -> None:
    """A task file with any mistake raises TaskError that names the file and the problem."""
    path = tmp_path / "task.toml"
    path.write_text(text)
    with pytest.raises(TaskError, match=mentions) as raised:
        task_module.load(path)
    assert str(path) in str(raised.value)


def test_missing_task_file() -> None:
    """A missing task file is a TaskError, not a FileNotFoundError."""
    with pytest.raises(TaskError, match="not found"):
        task_module.load("/nonexistent/task.toml")


def test_settings_defaults() -> None:
    """With no environment, settings are complete and local."""
    loaded = settings_module.load({})
    assert loaded.model_url is None
    assert loaded.endpoint("intake") == "tcp://127.0.0.1:7401"
    assert loaded.max_email_bytes == 256 * 1024


def test_reader_credit_follows_the_model() -> None:
    """A reader that asks a model holds one email at a time; one answering from recordings
    takes work in batches like any worker; an explicit setting wins either way."""
    assert settings_module.load({}).reader_credit == 64
    assert settings_module.load({"AIRLOCK_MODEL_URL": "http://m:8080"}).reader_credit == 1
    assert settings_module.load({"AIRLOCK_MODEL_URL": "http://m:8080", "AIRLOCK_READER_CREDIT": "4"}).reader_credit == 4
    assert settings_module.load({"AIRLOCK_READER_CREDIT": "2"}).reader_credit == 2


@pytest.mark.parametrize(("key", "value"), [
    ("AIRLOCK_INTAKE_PORT", "seventy"), ("AIRLOCK_INTAKE_PORT", "70000"),
    ("AIRLOCK_MODEL_TIMEOUT_S", "-1"), ("AIRLOCK_MODEL_URL", "ftp://x"), ("AIRLOCK_READER_CREDIT", "0"),
])
def test_bad_settings_name_their_key(key: str, value: str) -> None:
    """A setting that does not cast raises SettingsError with the key's name."""
    with pytest.raises(SettingsError, match=key):
        settings_module.load({key: value})


@pytest.mark.parametrize(("line", "grounded"), [("", False), ("grounded = true", True), ("grounded = false", False)])
def test_a_task_says_whether_its_value_must_be_in_the_email(tmp_path: Path, line: str, grounded: bool) -> None:
    """[value] grounded: off unless the task asks (docs/tasks.md)."""
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\n[reader]\ninstruction = "x"\n[value]\ntype = "digits"\nmax_length = 6\n{line}\n'
                    f'[[plan]]\ncall = "shop/lookup_order"\nvalue_into = "order_id"\n')
    assert task_module.load(path).value.grounded is grounded


def test_grounded_must_be_a_boolean(tmp_path: Path) -> None:
    """Decoded strictly: "yes" is not true, and the load names the key."""
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[reader]\ninstruction = "x"\n[value]\ntype = "choice"\nchoices = ["a"]\n'
                    'grounded = "yes"\n[[plan]]\ncall = "shop/lookup_order"\nvalue_into = "order_id"\n')
    with pytest.raises(TaskError, match="grounded"):
        task_module.load(path)
