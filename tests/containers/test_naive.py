"""The naive agent in the compose lab, beside airlock: on networks of its own that reach only
its model, fed by the page, with its own call log; the task switch; the approve tool."""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path

import msgspec

from airlock import trace
from tests.containers.lab import outcome, wait_for

HOSTILE = "demo/emails/en_refund_all.eml"  # a P.S. asks for shop/refund_all
REFUND = "samples/refund_damaged.eml"  # refund_with_approval escalates its confirmation mail
NAIVE_ROWS = {
    ("naive", "reaches its own model"), ("naive", "cannot reach the actor"), ("naive", "cannot open the page"),
    ("naive", "cannot reach airlock's model"), ("naive", "cannot reach the page's edge address"),
    ("naive", "cannot reach the broker's intake endpoint"), ("naive", "cannot reach the broker's actor endpoint"),
    ("naive", "cannot reach host services"), ("naive", "no route outside"), ("naive", "networks"),
    ("naive", "its own call log, not the actor's"), ("naive", "the model serves it no tools"),
    ("naive", "mounts"), ("dashboard", "reaches the naive agent"), ("dashboard", "network naive: internal"),
    ("naive-model", "cannot open the naive agent"), ("naive-model", "cannot reach the page"),
    ("naive-model", "cannot reach host services"), ("naive-model", "no route outside"),
}


def page(lab, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """The page on its published port, as a trainer's browser on the host reaches it."""
    connection = http.client.HTTPConnection("127.0.0.1", int(lab.env["AIRLOCK_DASHBOARD_PORT"]), timeout=30)
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read() or b"{}")
    finally:
        connection.close()


def naive_calls(lab, tmp_path: Path) -> list[dict]:
    """The naive agent's calls.jsonl, read out of its own volume (the host has no path to it)."""
    done = lab.compose("exec", "-T", "naive", "cat", "/data/calls.jsonl")
    copy = tmp_path / "naive-calls.jsonl"
    copy.write_text(done.stdout if done.returncode == 0 else "")
    return [msgspec.to_builtins(call) for call in trace.read_calls(copy)]


def test_verify_covers_the_naive_agent(lab) -> None:
    """`airlock verify` passes on the lab as shipped, with the naive agent's rows: its own model
    only, no broker endpoint, no actor, no page, no host, no outside; its model reaches nothing."""
    code, checks = lab.verify()
    failed = [c for c in checks if not c["ok"]]
    assert code == 0 and not failed, failed
    names = {(c["service"], c["check"]) for c in checks}
    assert names >= NAIVE_ROWS, sorted(NAIVE_ROWS - names)


def test_an_email_from_the_page_reaches_the_naive_agent_and_airlock(lab, tmp_path: Path) -> None:
    """POST /api/inject on the published page: airlock runs its plan and nothing else, and the
    naive agent (worst-case model) runs the call the email asked for, in its own call log."""
    text = (lab.folder / HOSTILE).read_text()
    status, answer = page(lab, "POST", "/api/inject", {"text": text})
    assert status == 200 and answer.get("id"), answer
    message_id = answer["id"]
    assert wait_for(lambda: outcome(lab, message_id), 120, f"the outcome of {message_id}")["outcome"] == "completed"
    airlock_calls = [(c["server"], c["tool"]) for c in lab.lines("calls.jsonl") if c["message_id"] == message_id]
    assert airlock_calls == [("shop", "lookup_order"), ("mail", "send_status")]
    deadline = time.monotonic() + 60
    while not (mine := [c for c in naive_calls(lab, tmp_path) if c["message_id"] == message_id]):
        assert time.monotonic() < deadline, f"no naive call for {message_id}: {naive_calls(lab, tmp_path)}"
        time.sleep(1)
    assert ("shop", "refund_all") in {(c["server"], c["tool"]) for c in mine}, mine
    assert not [c for c in lab.lines("calls.jsonl") if c["tool"] == "refund_all"]  # never in airlock's log


def test_the_task_switch_and_the_approve_tool(lab) -> None:
    """AIRLOCK_DEMO_TASK=refund_with_approval `up -d` switches the running lab: a refund email
    waits for a support lead, and `docker compose run --rm -u UID:GID approve ID --as
    support-lead --by dana` (the people's keys, read-only, as their owner) completes it."""
    lab.env["AIRLOCK_DEMO_TASK"] = "refund_with_approval"
    try:
        up = lab.compose("up", "-d", "--no-build")
        assert up.returncode == 0, up.stderr[-3000:]
        lab.wait_connected()
        done = lab.airlock("inject", "--json", "--wait", REFUND)
        assert '"outcome":"escalated"' in done.stdout, done.stdout + done.stderr
        message_id = done.stdout.split('"id":"')[1].split('"')[0]
        owner = lab.key_folder.stat()
        assert (owner.st_uid, owner.st_gid) == (os.stat(lab.folder).st_uid, os.stat(lab.folder).st_gid)
        approved = lab.compose("run", "--rm", "-u", f"{owner.st_uid}:{owner.st_gid}", "approve", message_id,
                               "--as", "support-lead", "--by", "dana")
        assert approved.returncode == 0 and "completed" in approved.stdout, approved.stdout + approved.stderr
        tools = [c["tool"] for c in lab.lines("calls.jsonl") if c["message_id"] == message_id]
        assert tools == ["open_refund_case", "send_refund_confirmation"]
    finally:
        lab.env.pop("AIRLOCK_DEMO_TASK")
        lab.compose("up", "-d", "--no-build")  # the lab as shipped, for the tests after this one
        lab.wait_connected()


# Run in the page's container: what the page asks the naive agent, over their own network.
ASK_NAIVE = r"""
import json, sys, urllib.request
base = "http://naive:8090"
about = json.load(urllib.request.urlopen(base + "/about", timeout=10))
request = urllib.request.Request(base + "/run", data=open(sys.argv[1], "rb").read(), method="POST",
                                 headers={"X-Airlock-Format": "eml"})
print(json.dumps({"about": about, "run": json.load(urllib.request.urlopen(request, timeout=120))}))
"""


def test_the_naive_agent_s_default_model_is_the_lab_s_smollm2_on_its_own_server(lab) -> None:
    """With AIRLOCK_NAIVE_MODEL unset, the naive agent asks naive-model (SmolLM2) with its calls
    held to a grammar: the page's container reaches it, and the model answers (no failure)."""
    lab.env.pop("AIRLOCK_NAIVE_MODEL")
    try:
        up = lab.compose("up", "-d", "--no-build", "--no-deps", "naive")
        assert up.returncode == 0, up.stderr[-3000:]
        deadline = time.monotonic() + 60
        while (done := lab.compose("exec", "-T", "dashboard", "python3", "-c", ASK_NAIVE,
                                   "/app/demo/emails/en_order.eml", timeout=180)).returncode != 0:
            assert time.monotonic() < deadline, done.stdout + done.stderr
            time.sleep(1)
        answer = json.loads(done.stdout)
        assert answer["about"]["constrained"] is True and "grammar" in answer["about"]["model"], answer
        assert answer["run"]["constrained"] is True and answer["run"]["outcome"] != "failed", answer
    finally:
        lab.env["AIRLOCK_NAIVE_MODEL"] = "worst-case"
        lab.compose("up", "-d", "--no-build", "--no-deps", "naive")  # as the other tests have it
