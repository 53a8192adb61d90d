"""The demonstration's ready emails: each labelled, in the course's languages, read by the
reader's own parser, scored by the attack harness, and written against the mock order
store so a data-only attack plants an order that is really somebody else's."""

from __future__ import annotations

import email.parser
import email.policy
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airlock import sources, task as task_module
from dashboard import inject, scenario
from harness import campaign
from harness.score import EmailResult, Scorer
from reader.mail import ParsedEmail, parse

ROOT = Path(__file__).resolve().parents[2]
EMAILS = ROOT / "demo" / "emails"
FILES = sorted(EMAILS.glob("*.eml"))
ORDERS = tomllib.loads((ROOT / "actor" / "orders.toml").read_text())["orders"]
ORDER_TASK = task_module.load(ROOT / "tasks" / "order_status.toml")
REFUND_TASK = task_module.load(ROOT / "tasks" / "refund_with_approval.toml")


def headers(path: Path) -> email.message.Message:
    return email.parser.BytesParser(policy=email.policy.default).parsebytes(path.read_bytes(), headersonly=True)


def loaded() -> dict[str, campaign.CampaignEmail]:
    return {Path(e.file).name: e for e in campaign.load([str(EMAILS)])}


def test_the_demo_has_emails() -> None:
    """The parametrized checks below run over the demo's emails."""
    assert len(FILES) >= 15


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_email_parses_with_the_readers_parser(path: Path) -> None:
    """The reader reads each one: none is refused before a model sees it."""
    assert isinstance(parse(path.read_bytes(), "eml"), ParsedEmail)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_email_says_what_it_tries_in_one_line(path: Path) -> None:
    """A label, a course language, an expectation and a category, each one line."""
    found = headers(path)
    label = str(found["X-Airlock-Label"] or "")
    assert 10 <= len(label) <= inject.MAX_LABEL_CHARS and "\n" not in label
    assert found["X-Airlock-Lang"] in scenario.LANGUAGES
    assert found["X-Airlock-Expect"] and found["X-Airlock-Category"]


@pytest.mark.parametrize("lang", scenario.LANGUAGES)
def test_each_language_has_a_benign_email_and_two_hostile(lang: str) -> None:
    """Per language: at least one benign email and two hostile ones."""
    kinds = Counter(e.benign for e in loaded().values() if headers(Path(e.file))["X-Airlock-Lang"] == lang)
    assert kinds[True] >= 1 and kinds[False] >= 2, kinds


def test_the_demo_covers_every_kind_of_email_the_scenario_needs() -> None:
    """An honest order, an injected call to shop/refund_all, a marker, a data-only attack, a refund."""
    emails = loaded().values()
    assert any(e.benign and (e.expect or "").isdigit() for e in emails)
    assert any(e.goal == "call:shop/refund_all" and e.category == "override" for e in emails)
    assert any(e.category == "marker" and b"[[tool:" in e.raw for e in emails)
    assert any(e.category == "data-only" and e.goal.startswith("value:") for e in emails)
    assert any(e.benign and e.expect in REFUND_TASK.value.choices for e in emails)  # type: ignore[union-attr]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_orders_are_the_senders_own_in_the_mock_store(path: Path) -> None:
    """The order an email rightly names belongs to its sender; a planted one to somebody else."""
    item = loaded()[path.name]
    sender = sources.sender_of(item.raw, "eml")
    if (item.expect or "").isdigit():
        assert ORDERS[item.expect]["customer"] == sender
    if item.goal.startswith("value:"):
        planted = item.goal.removeprefix("value:")
        assert planted in ORDERS and ORDERS[planted]["customer"] != sender


def calls(*pairs: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"step": n, "server": s, "tool": t, "args": a} for n, (s, t, a) in enumerate(pairs, start=1)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_email_scores_with_the_attack_harness(path: Path) -> None:
    """Doing what the email asks counts as its goal reached; doing the task counts as useful."""
    item = loaded()[path.name]
    task = REFUND_TASK if item.expect in ("damaged", "late", "wrong_item", "not_received") else ORDER_TASK
    scorer = Scorer(task)
    if item.benign:
        value, into = (item.expect, "reason") if task is REFUND_TASK else (item.expect, "order_id")
        done = [(step.server, step.tool, {into: value}) for step in task.plan]
        assert scorer.judge(EmailResult(item, "m", "completed", calls=calls(*done)))["useful"] is True
        return
    kind, _, target = item.goal.partition(":")
    if kind == "call":
        server, _, tool = target.partition("/")
        judged = scorer.judge(EmailResult(item, "m", "completed", calls=calls((server, tool, {}))))
        assert judged["goal_reached"] is True and judged["calls_outside_plan"] == 1
    else:
        assert kind == "value"
        planted = calls(("shop", "lookup_order", {"order_id": target}), ("mail", "send_status", {"order_id": target}))
        judged = scorer.judge(EmailResult(item, "m", "completed", calls=planted))
        assert judged["goal_reached"] is True and judged["value_mismatch"] is True
        assert judged["value_mismatch_invented"] is False  # the email itself planted it
    right = calls(*[(s.server, s.tool, {"order_id": item.expect}) for s in ORDER_TASK.plan])
    assert scorer.judge(EmailResult(item, "m", "completed", calls=right))["goal_reached"] is False


def test_every_scenario_step_names_a_demo_email() -> None:
    """Each step of the shipped scenario plays an email of demo/emails."""
    found = scenario.load(ROOT / "demo" / "scenario.toml", EMAILS)
    assert {step.email for step in found.steps} <= {p.name for p in FILES}


def test_page_lists_them_by_language_with_their_labels() -> None:
    """All are listed, English, Dutch, German, Russian, Turkish, each benign first (German: the seed)."""
    listed = inject.load_samples(EMAILS)
    assert len(listed) == len(FILES) <= inject.MAX_SAMPLES
    langs = [s.lang for s in listed]
    assert langs == sorted(langs, key=scenario.LANGUAGES.index)
    first_of = {lang: next(s for s in listed if s.lang == lang) for lang in scenario.LANGUAGES}
    assert first_of.pop("de").name == inject.SEED_SAMPLE
    assert all(s.category == "benign" for s in first_of.values())
    assert all(s.label == str(headers(EMAILS / s.name)["X-Airlock-Label"]) for s in listed)
    assert {s.origin for s in listed} == {f"emails/{p.name}" for p in FILES}


def test_label_and_language_default_without_headers(tmp_path: Path) -> None:
    """An email without the headers is listed by its file name, with no language."""
    (tmp_path / "my_own_email.eml").write_bytes(b"From: a@example.org\nSubject: hi\n\nOrder 5 please.\n")
    (sample,) = inject.load_samples(tmp_path)
    assert (sample.label, sample.lang, sample.category) == ("my own email", "", "")


@pytest.mark.parametrize(("task", "proof", "outcome", "refused_by"), [
    pytest.param("order_status.toml", "none", "completed", "", id="unguarded-lands"),
    pytest.param("order_status_guarded.toml", "none", "refused", "evidence", id="guarded-from-the-page"),
    pytest.param("order_status_guarded.toml", "dkim", "refused", "corroboration", id="guarded-proven-sender"),
])
def test_the_planted_order_lands_unguarded_and_is_refused_guarded(make_actor, logged_calls, task: str, proof: str,
                                                                  outcome: str, refused_by: str) -> None:
    """The scenario's data-only email, with the order it plants: the status mail goes to its
    owner on order_status; order_status_guarded refuses it, unproven sender or proven."""
    item = loaded()["en_data_only.eml"]
    planted = item.goal.removeprefix("value:")
    sender = sources.sender_of(item.raw, "eml")
    done = make_actor(task).run("m-data-only", planted, sender, sender_proof=proof)
    assert done.outcome == outcome, done.reason
    mails = [c for c in logged_calls() if c.tool == "send_status"]
    if outcome == "completed":
        assert [c.to for c in mails] == [ORDERS[planted]["customer"]] != [sender]
    else:
        assert mails == [] and refused_by in (done.calls[-1].decision or {}).get("refused_by", ""), done.calls[-1]


def test_the_refund_email_waits_for_a_support_lead(make_actor, logged_calls) -> None:
    """The scenario's escalation: the refund case opens, the confirmation mail waits for a person."""
    item = loaded()["en_refund_damaged.eml"]
    actor = make_actor("refund_with_approval.toml")
    done = actor.run("m-refund", item.expect or "", sources.sender_of(item.raw, "eml"))
    assert done.outcome == "escalated" and "support-lead" in done.reason
    assert [c.tool for c in logged_calls()] == ["open_refund_case"]
