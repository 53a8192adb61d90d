"""`airlock naive [--model-url URL] [--unconstrained] [--data-dir DIR] FILES...`: one JSON
line per email. The options are cli/tools.py's, as for every tool; AIRLOCK_NAIVE_MODEL
chooses the model (models.py), and the line says which and whether a grammar shaped it."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from actor import catalog as catalog_module
from actor.calllog import CallLog
from actor.ledger import LedgerError
from airlock import settings as settings_module, sources
from airlock.errors import EX_TEMPFAIL
from airlock.terminal import json_line
from redteam.naive import models
from redteam.naive.agent import NaiveAgent


def run(files: list[str], model_url: str | None, data_dir: str | None, constrained: bool = True) -> int:
    """An AirlockError (a bad setting, a missing file, no model) goes up to cli.runtime.handled,
    which prints it escaped and exits with its code."""
    settings = settings_module.load(data_dir=Path(data_dir) if data_dir else None)
    paths = list(sources.expand(files))
    kind = settings_module.reader(os.environ)("AIRLOCK_NAIVE_MODEL", models.kind_of, "smollm2")
    catalog = catalog_module.load()
    chosen = models.choose(kind, catalog, model_url or settings.model_url, settings.model_name,
                           settings.model_timeout_s, constrained)
    try:
        log = CallLog(settings.calls_path)
    except LedgerError as exc:  # a running actor holds this data dir's ledger, or its disk refuses it
        print(f"airlock naive: {exc}", file=sys.stderr)
        return EX_TEMPFAIL  # as the actor: busy or refused for now, try again
    agent = NaiveAgent(catalog, chosen.ask, log, constrained=chosen.constrained)
    prefix = uuid.uuid4().hex[:8]
    try:
        for number, path in enumerate(paths, start=1):
            result = agent.handle(f"naive-{prefix}-{number}", sources.read(path), sources.format_of(path))
            line = {"id": result.message_id, "file": str(path), "outcome": result.outcome, "reason": result.reason,
                    "answer": result.answer[:2000], "calls": result.calls, "ms": result.ms,
                    "model": chosen.name, "constrained": result.constrained}
            sys.stdout.write(json_line(line) + "\n")  # the answer and reason are email-made: no raw bidi
            sys.stdout.flush()
    finally:
        log.close()
    return 0

