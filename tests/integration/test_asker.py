"""The Asker (reader/ask.py) against a model endpoint on loopback: a constraint is sent only
where the task enables it and the endpoint takes it (llama.cpp's /props), decided once, asked
again while the server loads; "email" sends the email's own values; the trace names it; and
`airlock up` reads the slots from the same /props. The
grammars and schemas themselves are tests/unit/test_constraint.py's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from airlock import settings as settings_module, task as task_module
from ops import preflight
from reader import constraint, model
from reader.ask import Asker
from tests.conftest import FakeModel, closed_port_url

ROOT = Path(__file__).resolve().parents[2]
TASK = task_module.load(ROOT / "tasks" / "order_status.toml")


# --- the Asker: sent only when the task enables it and the endpoint takes it


@pytest.fixture
def llama(fake_model: Callable[..., FakeModel]) -> FakeModel:
    """llama.cpp's server, as far as the Asker looks: /props says how many it serves at once."""
    server = fake_model("4411")
    server.props = {"total_slots": 3, "build_info": "b1"}
    return server


@pytest.fixture
def other(fake_model: Callable[..., FakeModel]) -> FakeModel:
    """Any other OpenAI-compatible server: /props is a 404."""
    return fake_model("4411")


def asker(url: str, constrain: str, setting: str = "auto") -> Asker:
    task = msgspec.structs.replace(TASK, reader=msgspec.structs.replace(TASK.reader, constrain=constrain))
    return Asker(settings_module.load({"AIRLOCK_MODEL_CONSTRAINT": setting}), task, url)


MESSAGES = [{"role": "user", "content": "Order 4411"}]


def test_auto_sends_llama_cpps_server_the_types_grammar(llama: FakeModel) -> None:
    ask = asker(llama.url + "/v1", constrain="type")
    first, second = ask(MESSAGES), ask(MESSAGES)
    assert isinstance(first, model.ModelAnswer) and first.text == "4411" and first.constraint == "gbnf"
    assert [b.get("grammar") for b in llama.requests] == [constraint.gbnf(TASK.value)] * 2
    assert isinstance(second, model.ModelAnswer) and (second.text, second.constraint) == ("4411", "gbnf")
    assert llama.props_asked == 1  # decided once


def test_auto_sends_another_server_nothing(other: FakeModel) -> None:
    ask = asker(other.url, constrain="type")
    ask(MESSAGES)
    ask(MESSAGES)
    assert [set(b) for b in other.requests] == [{"model", "messages", "temperature", "max_tokens", "stream"}] * 2
    assert other.props_asked == 1  # it answered (404): not asked again


def test_a_task_that_does_not_enable_it_sends_nothing_and_asks_nothing(llama: FakeModel) -> None:
    answer = asker(llama.url, constrain="off", setting="gbnf")(MESSAGES)
    assert isinstance(answer, model.ModelAnswer) and answer.constraint == ""
    assert "grammar" not in llama.requests[0] and llama.props_asked == 0


def test_none_turns_it_off_and_json_schema_is_sent_when_chosen(other: FakeModel) -> None:
    asker(other.url, constrain="type", setting="none")(MESSAGES)
    asker(other.url, constrain="type", setting="json_schema")(MESSAGES)
    assert "response_format" not in other.requests[0]
    assert other.requests[1]["response_format"]["json_schema"]["schema"] == constraint.json_schema(TASK.value)
    assert other.props_asked == 0


def test_a_server_still_loading_its_model_is_asked_again(llama: FakeModel) -> None:
    """llama-server answers 503 on every route but /v1/models while it loads: that says
    nothing about what it is, so the next email asks again, and gets the grammar."""
    llama.props_status = 503
    ask = asker(llama.url, constrain="type")
    first = ask(MESSAGES)
    llama.props_status = 200
    second = ask(MESSAGES)
    assert isinstance(first, model.ModelAnswer) and first.constraint == ""
    assert isinstance(second, model.ModelAnswer) and second.constraint == "gbnf" and llama.props_asked == 2


def test_a_server_not_up_yet_is_asked_again_with_the_next_email(llama: FakeModel) -> None:
    ask = asker("http://127.0.0.1:9/v1", constrain="type")  # discard port: nothing listens
    assert ask.kind() is None and not ask._decided
    ask.url = llama.url
    assert ask.kind() == "gbnf"


def test_props_are_read_as_llama_cpps_or_not(llama: FakeModel, other: FakeModel) -> None:
    assert model.llama_cpp_props(llama.url + "/v1/chat/completions", 2) == model.ServerProps(total_slots=3)
    failure = model.llama_cpp_props(other.url, 2)
    assert isinstance(failure, model.ModelFailure) and failure.kind == "http_error"
    other.props = {"total_slots": 0}  # not a server that serves anything
    failure = model.llama_cpp_props(other.url, 2)
    assert isinstance(failure, model.ModelFailure) and failure.kind == "bad_body"


def test_email_mode_sends_the_emails_own_values(llama: FakeModel) -> None:
    ask = asker(llama.url, constrain="email")
    ask([{"role": "user", "content": "Subject: Order 4411\n\nplease call 0612 or ignore 5926"}])
    ask([{"role": "user", "content": "Do you sell gift cards?"}])
    ask([{"role": "user", "content": " ".join(str(n) for n in range(100, 200))}])  # too many: the type's
    assert [b["grammar"] for b in llama.requests] == [
        'root ::= "NONE" | "4411" | "0612" | "5926"\n', 'root ::= "NONE"\n', constraint.gbnf(TASK.value)]


def test_the_trace_says_what_the_model_decoded_under(llama: FakeModel) -> None:
    """The Reading notes the constraint; the trace's model_answer line has it as a field of
    its own, not among the notes it does not know."""
    from airlock import records
    from airlock.wire import Read, Reading
    from reader.app import Reader

    task = msgspec.structs.replace(TASK, reader=msgspec.structs.replace(TASK.reader, constrain="type"))
    reader = Reader(task, Asker(settings_module.load({}), task, llama.url), {}, llama.url)
    (reading,) = reader.handle(Read(message_id="m", raw=b"Order 4411 please", format="text"))
    assert isinstance(reading, Reading) and reading.notes["constraint"] == "gbnf"
    fields = records.notes(reading.notes)
    assert fields["constraint"] == "gbnf" and "constraint" not in fields.get("other_notes", {})


def test_readers_follow_the_slots_a_llama_cpp_server_says_it_has(fake_model) -> None:
    """llama.cpp's /props: its slots; any other server, a bad answer or none: None (1 reader)."""
    model = fake_model("4411")
    assert preflight.model_slots(model.url) is None  # /props is a 404
    model.props = {"total_slots": 4, "model_alias": "smollm2"}
    assert preflight.model_slots(model.url + "/v1") == 4
    for props in ({"total_slots": 0}, {"total_slots": "4"}, {"slots": 4}):
        model.props = props
        assert preflight.model_slots(model.url) is None, props
    assert preflight.model_slots(closed_port_url()) is None
