"""The actor: runs the fixed plan with checked values only, and refuses a bad plan at start."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from actor import catalog as catalog_module
from actor.app import build
from actor.plan import bind
from airlock import task as task_module
from airlock.errors import CatalogError
from airlock.wire import Done, Passed

ROOT = Path(__file__).resolve().parents[2]
ORDER = ROOT / "tasks" / "order_status.toml"


def test_passed_value_runs_the_plan(make_actor, logged_calls) -> None:
    """One Passed value makes exactly the planned calls, in order, with that value."""
    actor = make_actor()
    (done,) = actor.handle(Passed(message_id="m1", value="4411"))
    assert isinstance(done, Done) and done.outcome == "completed"
    logged = logged_calls()
    assert [(c.server, c.tool, c.args, c.step) for c in logged] == [
        ("shop", "lookup_order", {"order_id": "4411"}, 1),
        ("mail", "send_status", {"order_id": "4411"}, 2),
    ]
    assert all(c.message_id == "m1" and c.at.endswith("Z") for c in logged)
    assert [call.tool for call in done.calls] == ["lookup_order", "send_status"]


@pytest.mark.parametrize("value", [
    pytest.param("4411 bitte", id="free-text"), pytest.param("1234567", id="too-long"),
    pytest.param(4411, id="int-for-digits"), pytest.param(True, id="bool"),
    pytest.param("４４１１", id="fullwidth"), pytest.param("", id="empty"),
])
def test_value_outside_the_narrow_type_makes_no_call(make_actor, value, logged_calls) -> None:
    """Even a forged Passed cannot put a non-narrow value into a tool call."""
    actor = make_actor()
    done = actor.run("m2", value)
    assert done.outcome == "rejected" and "narrow type" in done.reason
    assert logged_calls() == []


def test_a_failing_tool_fails_the_email(settings, tmp_path: Path) -> None:
    """A tool that raises gives outcome failed with a typed error, never an invented success."""
    catalog = tmp_path / "catalog.toml"
    catalog.write_text((ROOT / "actor" / "catalog.toml").read_text().replace(
        'mock = { returns = "order" }', 'mock = { returns = "order", fail = "disk full" }'))
    actor = build(msgspec.structs.replace(settings, catalog=catalog), task_module.load(ORDER))
    try:
        done = actor.run("m3", "4411")
    finally:
        actor.close()
    assert done.outcome == "failed" and "step 1" in done.reason and "disk full" in done.reason
    assert [(c.step, c.status) for c in done.calls] == [(1, "error")]


def test_refund_task_binds_without_code(make_actor, logged_calls) -> None:
    """The second task runs on the same actor code: tasks are data."""
    actor = make_actor("refund_request.toml")
    (done,) = actor.handle(Passed(message_id="r1", value="damaged"))
    assert done.outcome == "completed"
    assert [c.tool for c in logged_calls()] == ["open_refund_case", "send_refund_confirmation"]


def _task(tmp_path: Path, plan: str, value: str = 'type = "digits"\nmax_length = 6') -> task_module.Task:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\n[reader]\ninstruction = "i"\n[value]\n{value}\n{plan}')
    return task_module.load(path)


@pytest.mark.parametrize(("plan", "mentions"), [
    pytest.param('[[plan]]\ncall = "shop/delete_everything"\n', "no such tool", id="unknown-tool"),
    pytest.param('[[plan]]\ncall = "mail/lookup_order"\nvalue_into = "order_id"\n', "no such tool", id="wrong-server"),
    pytest.param('[[plan]]\ncall = "shop/lookup_order"\n', "not filled", id="unfilled-arg"),
    pytest.param('[[plan]]\ncall = "shop/lookup_order"\nvalue_into = "orderid"\n', "no str argument",
                 id="unknown-slot"),
    pytest.param('[[plan]]\ncall = "shop/lookup_order"\nvalue_into = "order_id"\nargs = { extra = "x" }\n',
                 "fixed argument", id="unknown-fixed-arg"),
])
def test_bad_plans_refuse_to_start(tmp_path: Path, plan: str, mentions: str) -> None:
    """The actor binds the plan before any message and refuses a plan that does not fit."""
    with pytest.raises(CatalogError, match=mentions):
        bind(_task(tmp_path, plan), catalog_module.load())


def test_int_value_cannot_fill_a_str_slot(tmp_path: Path) -> None:
    """The value's type is checked against the slot's type at start."""
    task = _task(tmp_path, '[[plan]]\ncall = "shop/lookup_order"\nvalue_into = "order_id"\n',
                 value='type = "integer"\nmin = 1\nmax = 9')
    with pytest.raises(CatalogError, match="no int argument"):
        bind(task, catalog_module.load())


def test_duplicate_catalog_pair_is_refused(tmp_path: Path) -> None:
    """A catalog listing one server/tool pair twice does not load."""
    text = (ROOT / "actor" / "catalog.toml").read_text()
    first = text.index("[[tools]]")
    path = tmp_path / "catalog.toml"
    path.write_text(text + "\n" + text[first:text.index("[[tools]]", first + 1)])
    with pytest.raises(CatalogError, match="twice"):
        catalog_module.load(path)
