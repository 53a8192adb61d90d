"""The guided scenario as data: the shipped file plays the story the trainer tells, and a
bad file is a typed error naming its step, never a half-read scenario."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dashboard import scenario
from dashboard.scenario import ScenarioError, ScenarioMissing

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"
SHIPPED = (DEMO / "scenario.toml").read_text(encoding="utf-8")

STEP = """
[[steps]]
email = "{email}"
task = "order_status"
outcome = "{outcome}"
title = {{ en = "A step" }}
look = {{ en = ["Look here.", "And here."] }}
counters = {{ en = "completed +1" }}
"""
HEAD = 'title = { en = "A scenario" }\n'


def one_step(email: str = "en_order.eml", outcome: str = "completed") -> str:
    return STEP.format(email=email, outcome=outcome)


def written(tmp_path: Path, text: str) -> Path:
    emails = tmp_path / "emails"
    emails.mkdir(exist_ok=True)
    for name in ("en_order.eml", "en_refund_damaged.eml"):
        (emails / name).write_bytes((DEMO / "emails" / name).read_bytes())
    path = tmp_path / "scenario.toml"
    path.write_text(text, encoding="utf-8")
    return path


def shipped() -> scenario.Scenario:
    return scenario.load(DEMO / "scenario.toml", DEMO / "emails", ROOT / "tasks")


# --- the shipped scenario -------------------------------------------------------------------


def test_shipped_scenario_tells_the_story_in_order() -> None:
    """Honest order, injected call, marker, data-only unguarded then guarded, an escalation."""
    steps = shipped().steps
    assert [s.task for s in steps] == ["order_status"] * 4 + ["order_status_guarded", "refund_with_approval"]
    assert [s.outcome for s in steps] == ["completed"] * 4 + ["refused", "escalated"]
    assert steps[3].email == steps[4].email  # the same email, unguarded then guarded
    assert [s.approve for s in steps[:5]] == [None] * 5
    assert steps[5].approve == scenario.Approval(role="support-lead", by="dana")


def test_shipped_escalation_is_approved_by_a_principal_in_that_role() -> None:
    """The person the last step names may approve for the task's role."""
    step = shipped().steps[-1]
    task = tomllib.loads((ROOT / "tasks" / f"{step.task}.toml").read_text())
    principals = tomllib.loads((ROOT / "tasks" / "principals.toml").read_text())["principals"]
    assert step.approve is not None
    assert task["preconditions"][0]["approver_role"] == step.approve.role
    assert {"name": step.approve.by, "roles": [step.approve.role]} in principals


@pytest.mark.parametrize("lang", scenario.LANGUAGES)
def test_shipped_notes_are_written_in_every_course_language(lang: str) -> None:
    """Every step says what to look at (two or three lines) and what the counters show, in each language."""
    found = shipped()
    assert getattr(found.title, lang)
    for step in found.steps:
        assert getattr(step.title, lang) and getattr(step.counters, lang), (step.email, lang)
        assert 2 <= len(getattr(step.look, lang)) <= 3, (step.email, lang)


def test_commands_name_the_task_and_leave_the_id_to_the_page() -> None:
    """The switch command names the step's task; the approval names the person, the id is filled later."""
    found = shipped()
    guarded, escalation = found.steps[4], found.steps[5]
    assert scenario.commands(found, guarded) == {
        "switch": "AIRLOCK_DEMO_TASK=order_status_guarded docker compose up -d", "approve": None}
    assert scenario.commands(found, escalation)["approve"] == (
        'docker compose run --rm -u "$(id -u):$(id -g)" approve {id} --as support-lead --by dana')


def test_page_form_carries_the_injection_key_and_label() -> None:
    """The page gets each step numbered, with the key it injects by and its email's label."""
    page = scenario.to_page(shipped(), {"en_order.eml": "Honest order"})
    first = page["steps"][0]
    assert (first["number"], first["sample"], first["label"]) == (1, "demo/en_order.eml", "Honest order")
    assert page["steps"][1]["label"] == page["steps"][1]["email"]  # no label known: the file name
    assert page["languages"] == list(scenario.LANGUAGES) and page["title"]["en"]


def test_minimal_scenario_needs_english_only(tmp_path: Path) -> None:
    """A trainer's own file may leave out the other languages and the commands."""
    found = scenario.load(written(tmp_path, HEAD + one_step()), tmp_path / "emails")
    assert found.steps[0].look.nl is None and found.switch_command == scenario.SWITCH_COMMAND


# --- bad files ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "step", "words"), [
    pytest.param("title = [", None, "not TOML", id="not-toml"),
    pytest.param(HEAD + "steps = []", None, "steps", id="no-steps"),
    pytest.param(HEAD + "speed = 2\n" + one_step(), None, "speed", id="unknown-key"),
    pytest.param(one_step(), None, "title", id="no-title"),
    pytest.param(HEAD + one_step() + one_step().replace('task = "order_status"', 'task = 3'), 2, "task",
                 id="task-not-a-string"),
    pytest.param(HEAD + one_step() + one_step(outcome="exploded"), 2, "outcome", id="unknown-outcome"),
    pytest.param(HEAD + one_step() + one_step().replace("counters", "counter"), 2, "counter", id="misspelt-key"),
    pytest.param(HEAD + one_step(email="../../etc/passwd.eml"), 1, "email", id="email-path"),
    pytest.param(HEAD + one_step().replace('"Look here.", "And here."', '"a", "b", "c", "d"'), 1, "look",
                 id="four-lines"),
    pytest.param(HEAD + one_step().replace('en = "A step"', 'nl = "Een stap"'), 1, "en", id="no-english"),
    pytest.param(HEAD + one_step() + one_step(outcome="escalated"), 2, "approves", id="escalated-without-approver"),
    pytest.param(HEAD + one_step() + 'approve = { role = "support-lead", by = "dana" }\n', 1, "approves",
                 id="approver-without-escalation"),
    pytest.param('switch_command = "docker compose up -d"\n' + HEAD + one_step(), None, "{task}",
                 id="switch-without-task"),
    pytest.param('approve_command = "approve {id} --by {who}"\n' + HEAD + one_step(), None, "{by}",
                 id="approve-unknown-field"),
    pytest.param('approve_command = "approve {id.__class__}"\n' + HEAD + one_step(), None, "{id}",
                 id="approve-attribute"),
    pytest.param('approve_command = "approve {id"\n' + HEAD + one_step(), None, "brace", id="approve-brace"),
])
def test_bad_file_is_an_error_naming_its_step(tmp_path: Path, text: str, step: int | None, words: str) -> None:
    """Each kind of bad file is a ScenarioError that names the step (1-based) and the problem."""
    with pytest.raises(ScenarioError) as caught:
        scenario.load(written(tmp_path, text), tmp_path / "emails")
    assert caught.value.step == step
    assert words in str(caught.value)
    if step is not None:
        assert f"step {step}" in str(caught.value)


def test_step_email_must_be_in_the_emails_folder(tmp_path: Path) -> None:
    """A step naming an email the folder lacks is refused at that step."""
    with pytest.raises(ScenarioError, match=r"step 2: no email en_data_only\.eml") as caught:
        scenario.load(written(tmp_path, HEAD + one_step() + one_step("en_data_only.eml")), tmp_path / "emails")
    assert caught.value.step == 2


def test_step_task_must_be_a_task_file_when_tasks_are_given(tmp_path: Path) -> None:
    """Checked against a tasks folder, an unknown task is refused at its step."""
    path = written(tmp_path, HEAD + one_step() + one_step().replace('"order_status"', '"order_statuz"'))
    scenario.load(path, tmp_path / "emails")  # without a tasks folder the name is only a name
    with pytest.raises(ScenarioError, match="step 2 .*no task order_statuz") as caught:
        scenario.load(path, tmp_path / "emails", ROOT / "tasks")
    assert caught.value.step == 2


def test_missing_file_is_its_own_error(tmp_path: Path) -> None:
    """No file at all is ScenarioMissing, so the page can say there is none rather than a fault."""
    with pytest.raises(ScenarioMissing, match="no scenario file"):
        scenario.load(tmp_path / "scenario.toml", tmp_path)


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    """A file past the bound is refused by size, whatever it holds."""
    path = written(tmp_path, HEAD + one_step() + "#" * scenario.MAX_FILE_BYTES)
    with pytest.raises(ScenarioError, match="at most"):
        scenario.load(path, tmp_path / "emails")


def test_scenario_error_is_a_configuration_error() -> None:
    """The CLI's one handler exits 78 on it, as for any bad configuration."""
    from airlock.errors import EX_CONFIG, exit_code

    assert exit_code(ScenarioError("x", 1)) == EX_CONFIG


# --- airlock demo check ------------------------------------------------------------------


def test_demo_check_lists_the_shipped_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """`airlock demo check` reads the shipped scenario as the page does and lists its steps."""
    from cli import tools

    assert tools.main(["demo", "check", str(DEMO / "scenario.toml")]) == 0
    out = capsys.readouterr().out
    assert "6 steps" in out and "approved by dana as support-lead" in out


def test_demo_check_exits_78_naming_the_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad step is one line on stderr naming it, and the configuration exit code."""
    from airlock.errors import EX_CONFIG
    from cli import tools

    path = written(tmp_path, HEAD + one_step() + one_step(outcome="exploded"))
    assert tools.main(["demo", "check", str(path)]) == EX_CONFIG
    assert "step 2" in capsys.readouterr().err


def test_the_documented_step_decodes() -> None:
    """docs/dashboard.md's example step is a valid step as written."""
    import re

    page = (ROOT / "docs" / "dashboard.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", page, flags=re.DOTALL)
    assert example is not None
    (step,) = scenario.decode((HEAD + example.group(1)).encode()).steps
    assert (step.email, step.task, step.outcome) == ("en_data_only.eml", "order_status_guarded", "refused")
