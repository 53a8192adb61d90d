"""The compose lab on a real engine, started as docs/compose.md says (`docker compose up -d
--build` in a fresh clone, nothing before it): the seed email with the real model, the
host CLI with no export, and proven isolation."""

from __future__ import annotations

import os
import re
import shutil
import smtplib
import stat
import time
from pathlib import Path

import pytest

from course import catalog
from tests.containers.lab import BUILD_TIMEOUT_S, TRUSTED_AUTHSERV_ID

SEED = "samples/seed_4411_de.eml"
STUDENT_WHEN_ROOT = 4242  # tests run as root: `-u 0` would run the lab tool as root, so a student of our own
PLAN_4411 = [("shop", "lookup_order", {"order_id": "4411"}), ("mail", "send_status", {"order_id": "4411"})]


def planned_calls(lab, message_id: str) -> list[tuple]:
    return [(c["server"], c["tool"], c["args"]) for c in lab.lines("calls.jsonl") if c["message_id"] == message_id]


def test_seed_email_runs_the_plan_with_the_real_model(lab) -> None:
    """Inject from the host: calls.jsonl has the two planned calls with 4411; the answer is the model's."""
    done = lab.airlock("inject", "--json", "--wait", SEED)
    assert done.returncode == 0, done.stderr
    message_id = done.stdout.split('"id":"')[1].split('"')[0]
    assert '"outcome":"completed"' in done.stdout
    assert planned_calls(lab, message_id) == PLAN_4411
    (answer,) = [t for t in lab.lines("trace.jsonl") if t["message_id"] == message_id and t["event"] == "model_answer"]
    assert answer["source"] == "model" and answer["answer"] == "4411"


def test_verify_passes_on_the_lab(lab) -> None:
    """Every inspection and every probe passes on the stack as shipped."""
    code, checks = lab.verify()
    failed = [c for c in checks if not c["ok"]]
    assert code == 0 and not failed, failed
    names = {(c["service"], c["check"]) for c in checks}
    assert ("reader", "cannot reach the actor") in names and ("actor", "cannot reach the model") in names
    assert ("reader", "image has no tool code") in names and ("reader", "the model serves it no tools") in names
    assert ("init", "only the capabilities it needs") in names and ("init", "finished, exit 0") in names
    assert ("broker", "network edge: firewall covers it") in names


def test_inject_through_compose_run(lab) -> None:
    """`docker compose run --rm inject FILE` works for users without Python: completed, the two planned calls."""
    done = lab.compose("run", "--rm", "inject", SEED)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if SEED in line]
    message_id, outcome = line.split()[:2]
    assert outcome == "completed", done.stdout
    assert planned_calls(lab, message_id) == PLAN_4411


def student_folder(lab, name: str) -> tuple[Path, tuple[str, ...]]:
    """A student's folder in the lab's folder, owned by the student, and `compose run` as them."""
    uid, gid = (os.getuid(), os.getgid()) if os.getuid() != 0 else (STUDENT_WHEN_ROOT, STUDENT_WHEN_ROOT)
    mine = lab.folder / name
    mine.mkdir()
    os.chown(mine, uid, gid)  # the student's folder (a no-op unless the tests run as root)
    return mine, ("run", "--rm", "-u", f"{uid}:{gid}", "lab")


def test_lab_tool_through_compose_run(lab) -> None:
    """`docker compose run --rm -u UID:GID lab list|start|check|run` grades a student with no Python:
    the starter fails every checkpoint (exit 1), the reference solution passes every one, the
    in-stack checkpoint included, and `lab run` is clean (exit 0); every file written is the student's."""
    built = lab.compose("build", "lab", timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    total = len(catalog.find("separation").checkpoints)  # the lab's own count, in-the-stack included
    mine, student = student_folder(lab, "my-separation")
    uid, gid = mine.stat().st_uid, mine.stat().st_gid

    listed = lab.compose(*student, "list")
    assert listed.returncode == 0 and "separation" in listed.stdout, listed.stderr
    started = lab.compose(*student, "start", "separation", "--dir", "my-separation")
    assert started.returncode == 0, started.stderr
    first = lab.compose(*student, "check", "separation", "--dir", "my-separation")
    assert first.returncode == 1 and f"checkpoints 0 / {total}" in first.stdout, first.stdout + first.stderr

    shutil.copyfile(lab.folder / "labs" / "separation" / "solution" / "checker.py", mine / "checker.py")
    again = lab.compose(*student, "check", "separation", "--dir", "my-separation", timeout=600)
    assert again.returncode == 0 and f"checkpoints {total} / {total}" in again.stdout, again.stdout + again.stderr
    ran = lab.compose(*student, "run", "separation", "--dir", "my-separation", timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]

    written = [mine, *mine.rglob("*")]
    assert {p.name for p in written} >= {"my-separation", ".airlock-lab", "progress.json", "checker.py", "runs"}
    assert {(p.name, p.stat().st_uid, p.stat().st_gid) for p in written} == {(p.name, uid, gid) for p in written}
    assert not (lab.folder / ".hypothesis").exists() and not (mine / ".hypothesis").exists()


def student_override(lab, lab_id: str, name: str) -> Path:
    """The student's folder holding the reference, and its override written by `lab compose` in
    the lab tool's container (no Python on the host): the override's path in the lab's folder."""
    mine, student = student_folder(lab, name)
    (lab_spec,) = [c for c in catalog.load_all() if c.id == lab_id]
    for file in lab_spec.student_files:
        shutil.copyfile(lab.folder / "labs" / lab_id / "solution" / file, mine / file)
    written = lab.compose(*student, "compose", lab_id, "--dir", name)
    override = f"{name}/.airlock-lab/compose.yaml"
    assert written.returncode == 0, written.stdout + written.stderr
    assert f"docker compose -f compose.yaml -f {override} up -d --build" in written.stdout, \
        written.stdout + written.stderr
    assert f"source: \"{mine}\"" in (mine / ".airlock-lab" / "compose.yaml").read_text()  # the host's path
    return lab.folder / override


PLUGGED = [
    pytest.param("separation", "validator", SEED, PLAN_4411, id="separation-validator"),
    pytest.param("preconditions", "actor", SEED, PLAN_4411, id="preconditions-actor"),
    pytest.param("tool-identity", "actor", SEED,
                 [("shop", "lookup-order", {"order_id": "4411"}), ("mail", "send-status", {"order_id": "4411"})],
                 id="tool-identity-actor"),
]


@pytest.mark.parametrize(("lab_id", "service", "email", "plan"), PLUGGED)
def test_students_code_plugged_into_the_compose_lab(lab, lab_id: str, service: str, email: str, plan) -> None:
    """With `lab compose`'s override the stack runs the student's reference in its one service:
    the email completes with only the planned calls, the trace marks the steps that ran the
    student's code, and `airlock verify` fails on exactly that service's mounts, naming /student."""
    override = student_override(lab, lab_id, f"plugged-{lab_id}")
    run = catalog.find(lab_id).run
    assert run is not None  # every plugged lab runs a stack
    point = run.plug
    try:
        up = lab.compose("up", "-d", "--no-build", files=(str(override),))
        assert up.returncode == 0, up.stderr[-3000:]
        lab.wait_connected()
        if lab_id == "preconditions":
            # The guarded task answers only a sender someone proved: an injected
            # file's sender is unverified, so this one comes as mail the lab's mail server
            # vouched for, the way a student's customer writes in.
            outcome = smtp_outcome(lab, vouched_for((lab.folder / email).read_bytes(), "example.de"),
                                   f"plugged-{lab_id}@example.de")
            assert outcome["outcome"] == "completed", outcome
            message_id = outcome["message_id"]
        else:
            done = lab.airlock("inject", "--json", "--wait", email)
            assert done.returncode == 0 and '"outcome":"completed"' in done.stdout, done.stdout + done.stderr
            message_id = done.stdout.split('"id":"')[1].split('"')[0]
        calls = [c for c in lab.lines("calls.jsonl") if c["message_id"] == message_id]
        assert [(c["server"], c["tool"], c["args"]) for c in calls] == plan
        marked = [t for t in lab.lines("trace.jsonl") if t["message_id"] == message_id and t.get("student") == point]
        assert marked, f"no trace line of {message_id} marks {point}"
        if service == "actor":  # the call lines too: the step that ran them was decided by the student's code
            assert any(c.get("student") == point for c in calls), calls

        code, checks = lab.verify()
        failed = [c for c in checks if not c["ok"]]
        with_mounts = set(re.findall(r"^  ([a-z]+):\n(?:    .*\n)*?    volumes:", override.read_text(),
                                     flags=re.MULTILINE))
        assert service in with_mounts
        assert code == 1 and {c["service"] for c in failed} == with_mounts, failed
        assert {c["check"] for c in failed} == {"mounts"}, failed  # the extra mounts, and nothing else
        (mounts,) = [c for c in failed if c["service"] == service]
        assert "-> /student" in mounts["reason"], mounts
    finally:
        lab.compose("up", "-d", "--no-build")  # the stack as shipped, for the tests after this one
        lab.wait_connected()


def test_host_cli_finds_the_lab_keys_without_export(lab) -> None:
    """In the lab's folder, `airlock inject --wait` and `airlock trace` need no AIRLOCK_KEYS and no --data-dir."""
    assert not {"AIRLOCK_KEYS", "AIRLOCK_DATA_DIR"} & set(lab.env)
    done = lab.airlock("inject", "--wait", SEED)
    assert done.returncode == 0, done.stderr
    message_id, outcome = done.stdout.split()[:2]
    assert outcome == "completed", done.stdout
    assert planned_calls(lab, message_id) == PLAN_4411
    shown = lab.airlock("trace", message_id)
    assert shown.returncode == 0 and message_id in shown.stdout and "completed" in shown.stdout, shown.stderr


def test_init_gave_each_folder_to_its_user(lab) -> None:
    """The host user owns the keys (0700, secrets 0600); the services' user its own secret and the data (sticky)."""
    me = os.stat(lab.folder)
    keys, data = lab.key_folder.stat(), lab.data.stat()
    assert (keys.st_uid, stat.S_IMODE(keys.st_mode)) == (me.st_uid, 0o700)
    client_secret = (lab.key_folder / "intake.key_secret").stat()
    assert (client_secret.st_uid, stat.S_IMODE(client_secret.st_mode)) == (me.st_uid, 0o600)
    service_secret = (lab.key_folder / "services" / "reader" / "reader.key_secret").stat()
    assert (service_secret.st_uid, stat.S_IMODE(service_secret.st_mode)) == (10001, 0o640)
    assert (data.st_uid, data.st_gid, stat.S_IMODE(data.st_mode)) == (10001, me.st_gid, 0o1775)  # sticky


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_up_keeps_the_keys(lab) -> None:
    """`up -d` again (init runs again): every key byte stays, and the lab still completes the seed."""
    before = snapshot(lab.key_folder)
    again = lab.compose("up", "-d")
    assert again.returncode == 0, again.stderr[-3000:]
    assert snapshot(lab.key_folder) == before
    lab.wait_connected()
    done = lab.airlock("inject", "--wait", SEED)
    assert done.returncode == 0 and "completed" in done.stdout, done.stdout + done.stderr


def smtp_outcome(lab, raw: bytes, envelope_from: str) -> dict:
    """Send `raw` to the lab's published SMTP port; the outcome line of the one email the
    intake received from `envelope_from` (a sender each test uses once)."""
    with smtplib.SMTP("127.0.0.1", int(lab.env["AIRLOCK_SMTP_PORT"]), timeout=30) as smtp:
        smtp.sendmail(envelope_from, ["support@shop.example"], raw)

    def outcomes() -> list[dict]:
        ids = {t["message_id"] for t in lab.lines("trace.jsonl")
               if t["event"] == "received" and t.get("origin", "").startswith(f"smtp:{envelope_from}")}
        return [t for t in lab.lines("trace.jsonl") if t["event"] == "outcome" and t["message_id"] in ids]

    deadline = time.monotonic() + 60
    while not outcomes() and time.monotonic() < deadline:
        time.sleep(0.5)
    (outcome,) = outcomes()
    return outcome


def vouched_for(raw: bytes, domain: str) -> bytes:
    """`raw` as the mail server in front of the lab hands it on: its Authentication-Results
    on top, saying the From domain's DKIM signature verified."""
    return f"Authentication-Results: {TRUSTED_AUTHSERV_ID}; dkim=pass header.d={domain}\n".encode() + raw


def test_smtp_intake_in_the_lab(lab) -> None:
    """Mail sent to the published SMTP port runs the plan like an injected file."""
    outcome = smtp_outcome(lab, (lab.folder / SEED).read_bytes(), "tester@example.org")
    assert outcome["outcome"] == "completed"


WEAKENINGS = [
    pytest.param("reader:\n    networks: {readers: {}, model: {}, actors: {}}\n",
                 {("reader", "networks"), ("reader", "cannot reach the actor"),
                  ("reader", "cannot open the actor endpoint")}, id="reader-on-actor-network"),
    pytest.param("validator:\n    cap_add: [NET_RAW]\n", {("validator", "capabilities")},
                 id="validator-gains-a-capability"),
    pytest.param("actor:\n    read_only: false\n", {("actor", "read-only root")}, id="actor-writable-root"),
    pytest.param("validator:\n    privileged: true\n",
                 {("validator", "not privileged")}, id="validator-privileged"),
]


@pytest.mark.parametrize(("override", "expected"), WEAKENINGS)
def test_a_weakened_override_fails_on_exactly_that_point(lab, tmp_path, override: str, expected: set) -> None:
    """Each weakening makes verify exit 1, failing exactly the checks about that weakening."""
    path = tmp_path / "weaker.yaml"
    path.write_text("services:\n  " + override)
    service = override.split(":")[0]
    try:
        up = lab.compose("up", "-d", "--no-build", "--no-deps", service, files=(str(path),))
        assert up.returncode == 0, up.stderr
        code, checks = lab.verify()
        failed = {(c["service"], c["check"]) for c in checks if not c["ok"]}
        assert code == 1 and failed == expected, [c for c in checks if not c["ok"]]
    finally:
        lab.compose("up", "-d", "--no-build", "--no-deps", service)
        lab.wait_connected()


def test_model_down_falls_back_to_recordings(lab) -> None:
    """Stop the model: the reader answers from the recording, and the trace says so."""
    assert lab.compose("stop", "model").returncode == 0
    try:
        done = lab.airlock("inject", "--json", "--wait", SEED)
        message_id = done.stdout.split('"id":"')[1].split('"')[0]
        assert '"outcome":"completed"' in done.stdout
        (answer,) = [t for t in lab.lines("trace.jsonl")
                     if t["message_id"] == message_id and t["event"] == "model_answer"]
        assert answer["source"] == "recorded" and answer["model_error"]
    finally:
        lab.compose("start", "model")
        lab.wait_healthy("model")
