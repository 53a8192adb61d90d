"""The facts a tool's result gives later preconditions come from what the catalog declares
the tool provides (Tool.provides), pinned with its policy, never from how its mock behaves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from actor import catalog as catalog_module
from airlock.errors import CatalogError
from tests.conftest import CATALOG, ROOT, TASKS
from tests.unit.test_gate import rug_pull

PROVIDES = 'provides = { fact = "order", fields = ["customer", "status", "found"], lineage = "order_store" }\n'
OWNER, ORDER = "kunde@example.de", "4411"


@pytest.fixture
def unpinned(tmp_path: Path) -> Path:
    """The guarded task without its pins, so a test catalog may change lookup_order."""
    text = (TASKS / "order_status_guarded.toml").read_text()
    path = tmp_path / "guarded_unpinned.toml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("pin = ")) + "\n")
    return path


def load(text: str, folder: Path) -> catalog_module.Catalog:
    path = folder / f"catalog-{len(list(folder.glob('catalog-*')))}.toml"
    path.write_text(text)
    return catalog_module.load(path)


def read(done, name: str) -> dict | None:
    rules = {r["rule"]: r for r in done.calls[-1].decision["rules"]}
    return rules["evidence"]["read"].get(name)


def test_the_shipped_lookup_declares_the_order_facts() -> None:
    """shop/lookup_order provides order.customer, .status and .found of lineage order_store."""
    provides = catalog_module.load()[("shop", "lookup_order")].provides
    assert provides is not None and (provides.fact, provides.fields, provides.lineage) == (
        "order", ("customer", "status", "found"), "order_store")
    assert PROVIDES in CATALOG


def test_the_owner_is_answered_with_facts_the_catalog_declares(make_actor, unpinned: Path) -> None:
    """The shipped catalog: the owner's signed request is corroborated by order.customer."""
    done = make_actor(unpinned).run("m1", ORDER, OWNER, "dkim")
    assert done.outcome == "completed", done.reason
    assert read(done, "order.customer") == {"value": OWNER, "lineage": "order_store",
                                            "provenance": "step 1 shop/lookup_order"}


def test_a_mock_that_returns_an_order_provides_nothing_undeclared(make_actor, unpinned: Path, logged_calls) -> None:
    """Without `provides`, the same order-returning mock gives the preconditions no fact: the
    evidence rule refuses the mail (the executor no longer reads the mock's `returns`)."""
    actor = make_actor(unpinned, catalog_text=CATALOG.replace(PROVIDES, ""))
    done = actor.run("m1", ORDER, OWNER, "dkim")
    assert done.calls[0].result["customer"] == OWNER  # the mock still returned the order
    assert done.outcome == "refused" and done.calls[-1].decision["refused_by"] == "evidence", done.reason
    assert read(done, "order.customer") is None
    assert [c.tool for c in logged_calls()] == ["lookup_order"]


def test_the_lineage_is_the_catalogs(make_actor, unpinned: Path) -> None:
    """A tool declared to provide its facts from another upstream gives them that lineage,
    and the task's provenance rule (order_store) refuses them."""
    actor = make_actor(unpinned, catalog_text=CATALOG.replace('lineage = "order_store"', 'lineage = "crm"'))
    done = actor.run("m1", ORDER, OWNER, "dkim")
    assert done.outcome == "refused" and done.calls[-1].decision["refused_by"] == "evidence", done.reason
    customer = read(done, "order.customer")
    assert customer is not None and customer["lineage"] == "crm"


def test_declaring_facts_under_a_running_plan_is_a_relabel(make_actor, unpinned: Path, logged_calls) -> None:
    """A live catalog that starts declaring facts for a tool bound without them is refused
    (refused_by policy), as is one that stops declaring them."""
    actor = make_actor(unpinned, catalog_text=CATALOG.replace(PROVIDES, ""))
    rug_pull(actor, CATALOG)
    done = actor.run("m1", ORDER, OWNER, "dkim")
    assert done.outcome == "refused" and done.calls[0].decision["refused_by"] == "policy", done.reason
    assert "provides None -> " in done.reason
    actor = make_actor(unpinned)
    rug_pull(actor, CATALOG.replace(PROVIDES, ""))
    assert actor.run("m2", ORDER, OWNER, "dkim").calls[0].decision["refused_by"] == "policy"
    assert logged_calls() == []


def test_the_pin_covers_what_a_tool_provides(tmp_path: Path) -> None:
    """Changing a provided field or its lineage changes the tool's pin; a tool that provides
    nothing keeps the pin it had before tools could declare facts."""
    pins = {load(text, tmp_path)[("shop", "lookup_order")].pin for text in (
        CATALOG, CATALOG.replace('"found"]', '"paid"]'), CATALOG.replace('"order_store"', '"crm"'))}
    assert len(pins) == 3
    send = catalog_module.load()[("mail", "send_status")]
    assert send.provides is None and "provides" not in send.policy


@pytest.mark.parametrize(("provides", "error"), [
    pytest.param('{ fact = "order", fields = ["customer"], lineage = "intake" }', "only the actor's own", id="intake"),
    pytest.param('{ fact = "order", fields = ["customer"], lineage = "email" }', "only the actor's own", id="email"),
    pytest.param('{ fact = "order", fields = [], lineage = "crm" }', "length", id="no-fields"),
    pytest.param('{ fact = "Order.x", fields = ["customer"], lineage = "crm" }', "matching regex", id="bad-name"),
    pytest.param('{ fact = "order", fields = ["customer"], lineage = "crm", trust = 1 }', "unknown field", id="extra"),
])
def test_a_bad_declaration_stops_the_catalog(provides: str, error: str, tmp_path: Path) -> None:
    """A tool cannot claim a lineage the actor gives its own facts, nor declare nothing or junk."""
    with pytest.raises(CatalogError, match=error):
        load(CATALOG.replace(PROVIDES, f"provides = {provides}\n"), tmp_path)


def test_the_executor_reads_no_mock_setting() -> None:
    """What the executor decides with (facts, timeouts) it reads from the catalog's
    declarations: its code never reads a tool's `mock` table (that is actor/mocks.py's)."""
    source = (ROOT / "actor" / "executor.py").read_text()
    assert not re.search(r"\.mock\b", source)
