"""How the reader asks its model: the client (reader/model.py) plus the task's constraint.

One Asker per reader process. It decides once which constraint the endpoint takes
(AIRLOCK_MODEL_CONSTRAINT; `auto` asks the server's /props) and then adds it to every request
of a task that enables it. `airlock record` asks through the same Asker, so a recording holds
the answer the reader itself would get.
"""

from __future__ import annotations

from airlock.settings import Settings
from airlock.task import Task
from reader import constraint, model
from reader.prompt import ChatMessages


class Asker:
    def __init__(self, settings: Settings, task: Task, url: str) -> None:
        self.url, self.name, self.timeout_s = url, settings.model_name, settings.model_timeout_s
        self.narrow = task.value
        self.setting = settings.model_constraint if task.reader.constrain else "none"
        self._kind: constraint.Kind | None = None
        self._decided = self.setting != "auto"
        if self.setting == "gbnf":
            self._kind = "gbnf"
        elif self.setting == "json_schema":
            self._kind = "json_schema"

    def kind(self) -> constraint.Kind | None:
        """The constraint to send, or None. `auto` asks the server until it answers: a server
        not up yet is asked again with the next email (that email goes unconstrained)."""
        if not self._decided:
            props = model.llama_cpp_props(self.url, self.timeout_s)
            if isinstance(props, model.ServerProps):
                self._kind, self._decided = "gbnf", True
            elif props.kind in ("http_error", "bad_body"):
                self._decided = True  # it answered, and it is not llama.cpp's server
        return self._kind

    def __call__(self, messages: ChatMessages) -> model.ModelAnswer | model.ModelFailure:
        kind = self.kind()
        fields = constraint.request_fields(kind, self.narrow) if kind else None
        answer = model.ask(self.url, self.name, messages, self.timeout_s, fields)
        if fields and kind and isinstance(answer, model.ModelAnswer):
            return model.ModelAnswer(text=constraint.unwrap(kind, answer.text), ms=answer.ms, constraint=kind)
        return answer
