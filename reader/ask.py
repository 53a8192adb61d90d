"""How the reader asks its model: the client (reader/model.py) plus the task's constraint.

One Asker per reader process. It decides once which constraint the endpoint takes
(AIRLOCK_MODEL_CONSTRAINT; `auto` asks the server's /props) and then adds it to every request
of a task that enables it. `airlock record` asks through the same Asker, so a recording holds
the answer the reader itself would get. The model timeout is one deadline per email: a /props
question asked for that email and its completion share it.
"""

from __future__ import annotations

import time

from airlock.settings import Settings
from airlock.task import Task
from reader import constraint, grounding, model
from reader.prompt import SUBJECT_LABEL, ChatMessages

NOT_THERE = (400, 401, 403, 404, 405, 501)  # statuses that say "no such resource here", for good


class Asker:
    def __init__(self, settings: Settings, task: Task, url: str) -> None:
        self.url, self.name, self.timeout_s = url, settings.model_name, settings.model_timeout_s
        self.narrow, self.constrain = task.value, task.reader.constrain
        self.setting = settings.model_constraint if self.constrain != "off" else "none"
        self._kind: constraint.Kind | None = None
        self._decided = self.setting != "auto"
        if self.setting == "gbnf":
            self._kind = "gbnf"
        elif self.setting == "json_schema":
            self._kind = "json_schema"

    def kind(self, deadline: float | None = None) -> constraint.Kind | None:
        """The constraint to send, or None. `auto` asks the server until it says what it is:
        a server not up yet, or llama-server still loading its model (503 on every route but
        /v1/models), is asked again with the next email (that email goes unconstrained)."""
        if not self._decided:
            props = model.llama_cpp_props(self.url, self.timeout_s, deadline)
            if isinstance(props, model.ServerProps):
                self._kind, self._decided = "gbnf", True
            elif props.kind == "bad_body" or (props.kind == "http_error" and props.status in NOT_THERE):
                self._decided = True  # it answered, and it is not llama.cpp's server
        return self._kind

    def allowed(self, messages: ChatMessages) -> list[str] | None:
        """Under "email": the values the email holds (the prompt's last message is the email as
        prompt.email_text built it). Its Subject label is recognised by its text: a body that
        starts with the same words loses only those nine characters, which hold no value of a
        type that "email" lists (digits, numbers; a choice named "Subject:" aside)."""
        if self.constrain != "email":
            return None
        text = messages[-1]["content"]
        return grounding.candidates(text, text.startswith(SUBJECT_LABEL), self.narrow)

    def __call__(self, messages: ChatMessages) -> model.ModelAnswer | model.ModelFailure:
        deadline = time.monotonic() + self.timeout_s
        kind = self.kind(deadline)
        fields = constraint.request_fields(kind, self.narrow, self.allowed(messages)) if kind else None
        answer = model.ask(self.url, self.name, messages, self.timeout_s, fields, deadline)
        if fields and kind and isinstance(answer, model.ModelAnswer):
            return model.ModelAnswer(text=constraint.unwrap(kind, answer.text), ms=answer.ms, constraint=kind)
        return answer
