"""Which model the naive agent asks, and why: the switch AIRLOCK_NAIVE_MODEL.

    smollm2     (default) the model server at AIRLOCK_MODEL_URL, the lab's SmolLM2; its
                tool-call syntax constrained by a GBNF grammar of the catalog (grammar.py)
                unless switched off (`airlock naive --unconstrained`)
    worst-case  harness.hostile's obeying model, called in this process: no server, no
                network. It obeys the email's last instruction: the upper bound of what an
                injected email gets a naive agent to do.

Which one a demonstration runs is its honesty, so each says what it is and why in one
sentence (`NaiveModel.why`), for the page's naive pane.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from actor.catalog import Catalog
from airlock.errors import ConfigError
from harness import hostile
from reader import model
from reader.model import ModelAnswer, ModelFailure
from redteam.naive import grammar

KINDS = ("smollm2", "worst-case")
Kind = Literal["smollm2", "worst-case"]
Ask = Callable[[list[dict[str, str]]], ModelAnswer | ModelFailure]

WHY_CONSTRAINED = ("the lab's small model, SmolLM2; unconstrained it proposes no parseable call at all, so its "
                   "tool-call syntax is constrained by a grammar of the catalog: the model still chooses "
                   "which call, the email can steer that choice")
WHY_UNCONSTRAINED = ("the lab's small model, SmolLM2, unconstrained: it rarely writes a call the agent can "
                     "parse, so expect few or none")
WHY_WORST_CASE = ("the worst-case model, in process: it obeys the email's last instruction, the upper bound "
                  "of what an injected email gets a naive agent to do")


@dataclass(frozen=True)
class NaiveModel:
    name: str  # what the pane and the JSON line call it
    constrained: bool  # whether a grammar shapes its answers
    why: str  # one sentence for the pane
    ask: Ask


def kind_of(text: str) -> Kind:
    """An AIRLOCK_NAIVE_MODEL value; ValueError for any other word."""
    word = text.strip().lower() or "smollm2"
    if word == "smollm2":
        return "smollm2"
    if word == "worst-case":
        return "worst-case"
    raise ValueError(f"must be one of {', '.join(KINDS)}")


def choose(kind: Kind, catalog: Catalog, url: str | None, model_name: str, timeout_s: float,
           constrained: bool = True) -> NaiveModel:
    """The naive agent's model; ConfigError when smollm2 has no URL to ask."""
    if kind == "worst-case":
        return NaiveModel("worst-case (obeys the email)", False, WHY_WORST_CASE, worst_case)
    if not url:
        raise ConfigError("a model URL is needed (--model-url or AIRLOCK_MODEL_URL), "
                          "or AIRLOCK_NAIVE_MODEL=worst-case")
    extra = grammar.request_fields(catalog) if constrained else None
    ask = functools.partial(model.ask, url, model_name, timeout_s=timeout_s, extra=extra)
    if constrained:
        return NaiveModel(f"{model_name}, tool calls constrained by a grammar", True, WHY_CONSTRAINED, ask)
    return NaiveModel(f"{model_name}, unconstrained", False, WHY_UNCONSTRAINED, ask)


def worst_case(messages: list[dict[str, str]]) -> ModelAnswer:
    """harness.hostile's answer, as a model answer: no HTTP, no network."""
    started = time.monotonic()
    text = hostile.answer(messages)
    return ModelAnswer(text=text, ms=round((time.monotonic() - started) * 1000, 1))
