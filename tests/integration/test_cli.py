"""The airlock command: every entry point declared and working, every error one line."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import tomllib

import pytest

from cli.runtime import build_parser
from tests.conftest import ROOT, airlock_env
from tests.integration.conftest import wait_until

SEED = str(ROOT / "samples" / "seed_4411_de.eml")
COMMANDS = ["up", "inject", "trace", "status", "pending", "approve", "deny", "record", "verify", "attack", "naive",
            "model", "corpus", "keys", "bench", "lab", "pins", "prompts", "k8s", "swarm", "demo"]


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airlock", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, input=stdin, timeout=60)


def test_console_script_points_at_main() -> None:
    """pyproject declares `airlock = cli.runtime:main`, and that callable exists."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["airlock"].partition(":")
    assert (module, name) == ("cli.runtime", "main")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    """`airlock CMD --help` works for each command."""
    done = run(command, "--help")
    assert done.returncode == 0 and command in done.stdout


def test_parser_knows_exactly_the_documented_commands() -> None:
    """The parser's commands are the ones docs/cli.md and tests cover."""
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert subparsers.choices is not None and sorted(subparsers.choices) == sorted(COMMANDS)


@pytest.mark.parametrize("service", ["broker", "reader", "validator", "actor"])
def test_services_refuse_bad_config_with_one_line(tmp_path, service: str) -> None:
    """`python -m SERVICE` with a bad setting exits 78 with one line, no traceback."""
    env = {**airlock_env(tmp_path), "AIRLOCK_INTAKE_PORT": "nope", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", service], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78
    assert done.stderr.count("\n") == 1 and "AIRLOCK_INTAKE_PORT" in done.stderr


def test_inject_without_a_broker_is_one_clear_line(tmp_path) -> None:
    """No broker listening (keys in place): exit 1, one line that says where it looked."""
    from airlock import keys

    keys.generate(tmp_path / "keys")  # without keys the client stops sooner: tests/unit/test_cli.py
    env = {**airlock_env(tmp_path), "PYTHONPATH": str(ROOT)}
    done = run("inject", "--timeout", "0.5", SEED, env=env)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "did not answer" in done.stderr and env["AIRLOCK_INTAKE_PORT"] in done.stderr


@pytest.mark.parametrize(("args", "code", "says"), [
    (["inject", "/no/such/file.eml"], 2, "no such file"),
    (["inject"], 2, "nothing to inject"),
    (["trace", "nope"], 1, "no trace"),  # an unknown id is a refusal, not bad usage
    (["up", "--task", "/no/task.toml"], 78, "not found"),
    (["up", "--readers", "0"], 2, "at least 1"),
])
def test_usage_errors_are_one_line(tmp_path, args: list[str], code: int, says: str) -> None:
    """Mistakes give one line on stderr and a distinct exit code."""
    env = {**airlock_env(tmp_path), "PYTHONPATH": str(ROOT)}
    done = run(*args, env=env)
    assert done.returncode == code and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_inject_forms_and_trace(stack) -> None:
    """Files, --text and stdin all inject; --json prints id and file; trace shows the email."""
    s = stack().start()
    plain = s.airlock("inject", "--json", SEED)
    (line,) = [json.loads(x) for x in plain.stdout.splitlines()]
    assert set(line) == {"id", "file"} and line["file"] == SEED
    from_stdin = s.inject("-", stdin=(ROOT / "samples" / "seed_4411_de.eml").read_text())
    assert from_stdin[0]["file"] == "<stdin>" and from_stdin[0]["outcome"] == "completed"
    text = s.inject("--text", "hello")
    assert text[0]["outcome"] == "rejected"
    shown = s.airlock("trace", from_stdin[0]["id"])
    assert shown.returncode == 0
    assert [l.split()[2:4] for l in shown.stdout.splitlines()] == [
        ["broker", "received"], ["reader", "model_answer"], ["validator", "verdict"],
        ["actor", "authorization"], ["actor", "call"], ["actor", "observation"],
        ["actor", "authorization"], ["actor", "call"], ["actor", "observation"], ["broker", "outcome"]]
    assert "outcome=completed" in shown.stdout
    status = s.airlock("status")  # the table a person reads: a row per stage and its workers
    assert status.returncode == 0 and ["reader", "1"] in [line.split() for line in status.stdout.splitlines()]


FOLLOW_WAIT_S = 60  # for one email's lines to reach the follower; a hang fails here, named


def test_trace_follow_prints_new_lines(stack) -> None:
    """`airlock trace --follow` prints lines as the broker appends them: after it has shown
    one email's outcome it is at the end of the file, and a second email injected then
    still arrives, from received to outcome, while it keeps running."""
    s = stack().start()
    follower = subprocess.Popen([sys.executable, "-m", "airlock", "trace", "--follow", "--json"], cwd=ROOT,
                                env=s.env, stdout=subprocess.PIPE, text=True)
    output = follower.stdout
    assert output is not None  # piped
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in output:
            lines.put(line)
        lines.put(None)  # the follower ended

    reading = threading.Thread(target=pump, daemon=True)
    reading.start()

    def events_until_outcome(message_id: str) -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + FOLLOW_WAIT_S
        while not seen or seen[-1] != "outcome":
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"trace --follow showed no outcome for {message_id} in {FOLLOW_WAIT_S} s: {seen}")
            assert line is not None, f"trace --follow ended (exit {follower.poll()}) after {seen}"
            record = json.loads(line)
            if record.get("message_id") == message_id:
                seen.append(record["event"])
        return seen

    try:
        for _ in range(2):  # the second is appended after the follower has read to the end
            (result,) = s.inject(SEED)
            seen = events_until_outcome(result["id"])
            assert seen[0] == "received" and "call" in seen, seen
        assert follower.poll() is None, "trace --follow stopped after the lines there were"
    finally:
        follower.terminate()
        follower.wait(5)
        reading.join(5)
        output.close()


@pytest.mark.parametrize("keys_made", [
    pytest.param("another-stack", id="another-stacks-keys"),
    pytest.param("same-broker-key", id="client-key-not-allowed"),
])
def test_a_key_the_broker_refuses_is_named_not_a_timeout(stack, tmp_path, keys_made: str) -> None:
    """Keys from another data dir (or a client key the broker does not allow): exit 1 with
    'refused this key' within a second, not a 5 s 'did not answer'."""
    from airlock import keys

    s = stack().start()
    other = tmp_path / "other-keys"
    keys.generate(other)
    if keys_made == "same-broker-key":  # the right broker, an intake key it does not know
        (other / "broker.key").write_bytes((s.data / "keys" / "broker.key").read_bytes())
    env = {**s.env, "AIRLOCK_KEYS": str(other)}
    for args in (["inject", SEED], ["status"]):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "airlock", *args, "--timeout", "5"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert time.monotonic() - started < 4, done.stderr
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "refused this key" in done.stderr and "--data-dir of `airlock up`" in done.stderr, done.stderr
        assert str(other) in done.stderr and "did not answer" not in done.stderr
    assert s.trace(event="received") == []  # nothing got through


def test_email_made_text_is_escaped_on_the_terminal(stack, tmp_path) -> None:
    """A charset name holding an OSC retitle and a bidi override reaches `inject --wait`,
    `trace` and `--json` escaped, and --json still decodes to the exact reason."""
    s = stack().start()
    evil = tmp_path / "evil.eml"
    evil.write_text("From: a@example.org\nSubject: hi\nContent-Type: text/plain; "
                    "charset=\"x\x1b]0;pwned\x07\u202e\"\n\nWhere is order 4411?\n")
    shown = s.airlock("inject", "--wait", str(evil))
    assert shown.returncode == 0 and "rejected" in shown.stdout
    assert "x\\x1b]0;pwned\\x07\\u202e" in shown.stdout
    as_json = s.airlock("inject", "--wait", "--json", str(evil))
    (line,) = as_json.stdout.splitlines()
    assert json.loads(line)["reason"].endswith("x\x1b]0;pwned\x07\u202e")
    traced = s.airlock("trace", json.loads(line)["id"])
    assert "x\\x1b]0;pwned\\x07\\u202e" in traced.stdout
    for output in (shown.stdout, as_json.stdout, traced.stdout):
        assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output


def test_status_json(stack) -> None:
    """`status --json` is one JSON line with the workers, queue, counters and what is stuck."""
    s = stack().start()
    done = s.airlock("status", "--json")
    status = json.loads(done.stdout)
    assert set(status) == {"workers", "queued", "in_flight", "counters", "waiting"} and status["workers"]["reader"] == 1


def test_ctrl_c_during_inject_wait_prints_what_finished(stack, fake_model) -> None:
    """Ctrl-C while one email is done and one still with a slow model: both are printed,
    the unfinished one with its id, and the exit status is 130."""
    def reply(messages) -> str:
        if "slow please" in messages[-1]["content"]:
            time.sleep(25)
        return "4411"

    model = fake_model(reply)
    s = stack(AIRLOCK_MODEL_TIMEOUT_S="60").start("--model-url", model.url, "--readers", "2")
    waiting = subprocess.Popen([sys.executable, "-m", "airlock", "inject", "--wait", "--json", "--text",
                                "slow please, where is order 4411?", SEED], env=s.env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: any(o["outcome"] == "completed" for o in s.trace(event="outcome")), 30)
        # The broker sends the Result before it writes the outcome line, and the client
        # reads what has arrived before it reports; this only covers loopback's latency.
        time.sleep(0.2)
        waiting.send_signal(signal.SIGINT)
        out, err = waiting.communicate(timeout=10)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 130, err
    lines = {line["file"]: line for line in map(json.loads, out.splitlines())}
    assert lines[SEED]["outcome"] == "completed"
    slow = lines["--text"]
    assert slow["outcome"] == "pending" and f"airlock trace {slow['id']}" in slow["reason"]
    assert "interrupted: 1 of 2" in err and "Traceback" not in err


def test_decisions_on_unknown_ids_are_refusals(stack) -> None:
    """approve/deny of an id that waits for nothing: exit 1 with the broker's reason. (A
    task with principals: `airlock up` gives each a key, and only such a key decides.)"""
    s = stack(task=str(ROOT / "tasks" / "refund_with_approval.toml")).start()
    for verb in ("approve", "deny"):
        done = s.airlock(verb, "nope-1", "--as", "support-lead", "--by", "dana")
        assert done.returncode == 1 and "not waiting" in done.stderr, done.stderr
    nobody = s.airlock("approve", "nope-1", "--as", "support-lead", "--by", "erin")  # not a principal: no key
    assert nobody.returncode == 1 and "people/erin.key_secret" in nobody.stderr, nobody.stderr


def test_naive_json_lines_hold_no_raw_bidi(tmp_path, fake_model) -> None:
    """`airlock naive` prints the model's (email-steered) answer as JSON with bidi escaped."""
    model = fake_model("done\u202e\u2066 4411")
    env = {**airlock_env(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    done = run("naive", "--model-url", model.url, "--data-dir", str(tmp_path / "data"), SEED, env=env)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert "done\u202e\u2066 4411" in json.loads(line)["answer"]
    assert "\u202e" not in done.stdout and "\u2066" not in done.stdout


def test_naive_json_lines_say_which_values_the_email_holds(tmp_path, fake_model) -> None:
    """Each call in `airlock naive`'s line says which of its values occur in the email, under
    the task's narrow type, so the attack scorer never parses the email again."""
    model = fake_model("shop/lookup_order(order_id=4411)\nmail/send_status(order_id=12345)")
    env = {**airlock_env(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    done = run("naive", "--model-url", model.url, "--data-dir", str(tmp_path / "data"), SEED, env=env)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert [c["in_email"] for c in json.loads(line)["calls"]] == [{"order_id": True}, {"order_id": False}]


def test_record_shows_an_email_made_reason_escaped(tmp_path) -> None:
    """`airlock record` skips an email with a hostile charset name and prints it escaped."""
    task = tmp_path / "task.toml"
    task.write_text((ROOT / "tasks" / "order_status.toml").read_text()
                    .replace('"../samples/recorded/order_status.jsonl"', '"recorded.jsonl"'))
    evil = tmp_path / "evil.eml"
    evil.write_text("From: a@example.org\nSubject: hi\nContent-Type: text/plain; "
                    "charset=\"x\x1b]0;pwned\x07\u202e\"\n\nWhere is order 4411?\n")
    done = run("record", "--model-url", "http://127.0.0.1:9", "--task", str(task), str(evil),
               env={**airlock_env(tmp_path / "data"), "PYTHONPATH": str(ROOT)})
    assert "skip" in done.stdout and "x\\x1b]0;pwned\\x07\\u202e" in done.stdout, done.stdout + done.stderr
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout


def test_up_starts_as_many_readers_as_the_model_serves_at_once(stack, fake_model) -> None:
    """A llama.cpp server that says it has 3 slots gets 3 readers (one email each, so no queue
    forms in front of the model); --readers still wins."""
    model = fake_model("4411")
    model.props = {"total_slots": 3}
    s = stack().start("--model-url", model.url)
    banner = "".join(s.output)
    assert "3 reader(s) (the model serves 3 at once)" in banner, banner
    assert sorted(p.name for p in (s.data / "run").glob("reader*.pid")) == ["reader-1.pid", "reader-2.pid",
                                                                             "reader-3.pid"]
    (done,) = s.inject(SEED)
    assert done["outcome"] == "completed"
    s.stop()
    asked = stack().start("--model-url", model.url, "--readers", "1")
    assert "1 reader(s)\n" in "".join(asked.output)
