"""The lab's model image on its own (the one this run's compose lab built): llama-server takes
every grammar the reader derives, answers within it, follows the container's CPUs and its
slot setting, and keeps its tools closed whatever its environment says.

Each container is this run's (named after the lab's project, a port of its own on loopback)
and is removed by the test that started it, hardened as compose runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from airlock.task import Choice, Digits, IntegerRange
from ops.ports import free_ports
from reader import constraint

HARDENING = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
             "--user", "10001:10001", "--pids-limit", "128", "--memory", "1g", "--memory-swap", "1g",
             "--tmpfs", "/tmp:size=16m,mode=1777"]


def get(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}


@contextmanager
def model(lab, *options: str) -> Iterator[tuple[str, str]]:
    """The model image, started with `options` (docker run's); yields its URL and name."""
    (port,) = free_ports(1)
    name = f"{lab.project}-model-{port}"
    started = subprocess.run(["docker", "run", "-d", "--name", name, *HARDENING, "-p", f"127.0.0.1:{port}:8080",
                              *options, f"airlock/model:{lab.tag}"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if get(url + "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, logs(name)
            time.sleep(0.5)
        yield url, name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def logs(name: str) -> str:
    return subprocess.run(["docker", "logs", name], capture_output=True, text=True, timeout=30).stderr


def ask(url: str, grammar: str | None, text: str = "Where is my order 4411? Call me on 0612.",
        fields: dict | None = None) -> str:
    body = {"model": "smollm2", "temperature": 0, "max_tokens": 24, "messages": [
        {"role": "system", "content": "Reply with the order number only, or NONE."},
        {"role": "user", "content": text}]}
    extra = fields if fields is not None else ({"grammar": grammar} if grammar else {})
    code, answer = get(url + "/v1/chat/completions", {**body, **extra})
    assert code == 200, (code, extra)
    return answer["choices"][0]["message"]["content"]


def test_every_grammar_the_reader_derives_is_taken_and_kept(lab) -> None:
    """Each narrow type's grammar, and the email's own values: llama-server accepts it and the
    answer is in its language (NONE or a value), whatever the model would rather say."""
    cases = [
        (constraint.gbnf(Digits(max_length=6)), r"NONE|[0-9]{1,6}"),
        (constraint.gbnf(IntegerRange(min=1, max=99)), r"NONE|-?[0-9]{1,19}"),
        (constraint.gbnf(Choice(choices=["damaged", "late", 'say "hi" \\ ünïcödé'])),
         r'NONE|damaged|late|say "hi" \\ ünïcödé'),
        (constraint.gbnf(Digits(max_length=6), ["0612"]), r"NONE|0612"),  # 4411 left out on purpose
        (constraint.gbnf(Digits(max_length=6), []), r"NONE"),
    ]
    with model(lab) as (url, _):
        for grammar, language in cases:
            assert grammar is not None
            answer = ask(url, grammar)
            assert re.fullmatch(language, answer), (grammar, answer)
        assert ask(url, None, "Hello! Tell me a joke about ducks.") != ""  # unconstrained still answers


def test_the_json_schema_form_is_taken_and_unwrapped(lab) -> None:
    """The OpenAI-style form (response_format with a JSON schema), which llama-server takes
    too: the answer is {"answer": ...} and unwraps to NONE or a value of the type."""
    narrow = Digits(max_length=6)
    with model(lab) as (url, _):
        for allowed, language in ((None, r"NONE|[0-9]{1,6}"), (["0612"], r"NONE|0612")):
            fields = constraint.request_fields("json_schema", narrow, allowed)
            written = ask(url, None, fields=fields)
            assert re.fullmatch(language, constraint.unwrap("json_schema", written)), written


def test_threads_follow_the_containers_cpus_and_slots_the_setting(lab) -> None:
    with model(lab, "--cpus", "1", "--env", "AIRLOCK_MODEL_SLOTS=2") as (url, name):
        assert get(url + "/props")[1]["total_slots"] == 2
        assert "model: llama-server, 1 threads, 2 slot(s) of 2048 tokens" in logs(name)


def test_tools_stay_closed_whatever_the_environment_says(lab) -> None:
    """llama-server would read LLAMA_ARG_TOOLS and LLAMA_ARG_AGENT (file and shell tools, a
    CORS proxy) and LLAMA_ARG_ENDPOINT_SLOTS; the entrypoint passes none of them on."""
    with model(lab, "--env", "LLAMA_ARG_TOOLS=all", "--env", "LLAMA_ARG_AGENT=1",
               "--env", "LLAMA_ARG_ENDPOINT_SLOTS=1", "--env", "LLAMA_ARG_ENDPOINT_PROPS=1") as (url, _):
        for path, body in (("/tools", None), ("/tools", {}), ("/slots", None), ("/cors-proxy", None),
                           ("/props", {"n_parallel": 4})):
            code, _ = get(url + path, body)
            assert code in (403, 404, 501), (path, code)


@pytest.mark.parametrize("value", ["0", "lots", "99999"])
def test_a_bad_setting_stops_the_container_with_a_reason(lab, value: str) -> None:
    done = subprocess.run(["docker", "run", "--rm", *HARDENING, "--env", f"AIRLOCK_MODEL_THREADS={value}",
                           f"airlock/model:{lab.tag}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 64 and "AIRLOCK_MODEL_THREADS" in done.stderr
