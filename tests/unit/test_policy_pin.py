"""A tool's pin covers every catalog field that decides policy, so a
provider cannot relabel a tool (class, reversibility, permission, timeout) under a plan."""

from __future__ import annotations

import re

import pytest

from actor import catalog as catalog_module
from actor.plan import bind
from airlock import task as task_module
from airlock.errors import CatalogError
from tests.conftest import CATALOG, TASKS
from tests.unit.test_gate import rug_pull

SEND_STATUS = re.compile(r'tool = "send_status"\n(?:(?!\[\[).*\n)*')

RELABELS = [
    pytest.param('blast_radius = "third_party"', 'blast_radius = "internal"', id="class"),
    pytest.param('reversibility = "irreversible"', 'reversibility = "reversible"', id="reversibility"),
    pytest.param('permission = "write"', 'permission = "read"', id="permission"),
    pytest.param('args = { order_id = { type = "str", max_length = 32 } }\n',
                 'args = { order_id = { type = "str", max_length = 32 } }\ntimeout_s = 600.0\n', id="timeout"),
]


def relabelled(old: str, new: str) -> str:
    """The catalog with only mail/send_status's `old` line changed to `new`."""
    match = SEND_STATUS.search(CATALOG)
    assert match and old in match.group(0), "the shipped catalog changed: update this test"
    return CATALOG[:match.start()] + match.group(0).replace(old, new, 1) + CATALOG[match.end():]


@pytest.mark.parametrize(("old", "new"), RELABELS)
def test_a_relabel_changes_the_pin(tmp_path, old: str, new: str) -> None:
    """Same server, name, description and schema, one policy field changed: a new pin."""
    path = tmp_path / "catalog.toml"
    path.write_text(relabelled(old, new))
    shipped = catalog_module.load(catalog_module.DEFAULT_PATH)[("mail", "send_status")]
    changed = catalog_module.load(path)[("mail", "send_status")]
    assert (changed.description, changed.args) == (shipped.description, shipped.args)
    assert changed.pin != shipped.pin


@pytest.mark.parametrize(("old", "new"), RELABELS)
def test_the_guarded_task_does_not_start_on_a_relabelled_catalog(tmp_path, old: str, new: str) -> None:
    """The guarded task pins send_status: a relabel before start stops the actor, naming the pin."""
    path = tmp_path / "catalog.toml"
    path.write_text(relabelled(old, new))
    with pytest.raises(CatalogError, match="pin failed for mail/send_status"):
        bind(task_module.load(TASKS / "order_status_guarded.toml"), catalog_module.load(path))


def test_a_live_relabel_to_internal_cannot_switch_the_guard_off(make_actor, logged_calls) -> None:
    """The relabel attack: send_status relabelled internal under a running guarded actor, and
    an order that is not the sender's: the step is refused by the pin, nothing is sent."""
    actor = make_actor("order_status_guarded.toml")
    rug_pull(actor, relabelled('blast_radius = "third_party"', 'blast_radius = "internal"'))
    done = actor.run("m1", "772", "kunde@example.de")  # 772 is tom.baker's order
    assert done.outcome == "refused" and done.calls[-1].decision["refused_by"] == "pin"
    assert [c.tool for c in logged_calls()] == ["lookup_order"]


def test_an_unpinned_step_keeps_the_policy_it_was_bound_with(make_actor, logged_calls) -> None:
    """Without a pin, a class relabelled after start is refused too: the actor keeps the
    policy fields it bound at start and runs no tool whose policy changed since."""
    actor = make_actor("order_status.toml")
    rug_pull(actor, relabelled('blast_radius = "third_party"', 'blast_radius = "internal"'))
    done = actor.run("m1", "772")
    assert done.outcome == "refused" and done.calls[-1].decision["refused_by"] == "policy"
    assert "blast_radius" in done.reason
    assert [c.tool for c in logged_calls()] == ["lookup_order"]
