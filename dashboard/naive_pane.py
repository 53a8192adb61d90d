"""The naive pane: each email injected from the page, also given to the naive agent.

The naive agent (redteam/naive/) hands the model the email *and* the tools, and runs whatever
calls come back: the design airlock exists to avoid. The dashboard never imports it (nor
anything of `redteam`); it runs `airlock naive` (`python -m airlock naive`) as a subprocess per email, with the
email in a temporary file and
its own temporary data folder (so its calls.jsonl never mixes with airlock's), and reads
the one JSON line it prints. The pane is on only when a model URL is given
(AIRLOCK_NAIVE_MODEL_URL or --naive-model-url) and the redteam package is installed; the
dashboard's container image ships without it, so there the pane says it is off and why.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from airlock.interpreter import python_command

MAX_PARALLEL = 2  # naive runs at once; the rest wait their turn
MAX_WAITING = 16  # beyond this, an injected email is not given to the naive agent
EXTRA_TIMEOUT_S = 30.0  # on top of the model timeout: interpreter start, imports, tools


class NaivePane:
    def __init__(self, model_url: str | None, model_timeout_s: float, env: dict[str, str] | None = None) -> None:
        self.model_url = model_url
        self.timeout_s = model_timeout_s + EXTRA_TIMEOUT_S
        self.enabled, self.reason, root = _availability(model_url)
        self.env = dict(os.environ if env is None else env)
        if root is not None:  # the subprocess runs in a temporary folder: tell it where redteam/ is
            self.env["PYTHONPATH"] = os.pathsep.join(p for p in (root, self.env.get("PYTHONPATH", "")) if p)
        self._slots = asyncio.Semaphore(MAX_PARALLEL)
        self._waiting = 0

    def describe(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "reason": self.reason}

    async def run(self, message_id: str, raw: bytes, fmt: str) -> dict[str, Any]:
        """Run the naive agent on one email; the result as the pane shows it, never raising."""
        if self._waiting >= MAX_WAITING:
            return {"id": message_id, "status": "skipped", "reason": "the naive agent is busy; not run"}
        self._waiting += 1
        try:
            async with self._slots:
                return await self._run(message_id, raw, fmt)
        finally:
            self._waiting -= 1

    async def _run(self, message_id: str, raw: bytes, fmt: str) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="airlock-naive-") as folder:
            email = Path(folder) / ("email.eml" if fmt == "eml" else "email.txt")
            email.write_bytes(raw)
            process = await asyncio.create_subprocess_exec(
                *python_command("-m", "airlock", "naive", "--model-url", str(self.model_url),
                                "--data-dir", str(Path(folder) / "data"), str(email)),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, cwd=folder)
            try:
                out, err = await asyncio.wait_for(process.communicate(), self.timeout_s)
            except (TimeoutError, asyncio.CancelledError) as exc:
                process.kill()
                await process.wait()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return {"id": message_id, "status": "error", "reason": f"no answer within {self.timeout_s:.0f} s"}
        return parse_output(message_id, process.returncode, out, err)


def parse_output(message_id: str, code: int | None, out: bytes, err: bytes) -> dict[str, Any]:
    """The naive agent's JSON line as a pane entry; its stderr's last line if it failed."""
    line = out.decode("utf-8", errors="replace").strip().splitlines()[:1]
    try:
        result = json.loads(line[0]) if line else None
    except ValueError:
        result = None
    if code != 0 or not isinstance(result, dict):
        said = err.decode("utf-8", errors="replace").strip().splitlines()
        return {"id": message_id, "status": "error",
                "reason": f"naive agent exited with {code}: {said[-1] if said else 'no output'}"}
    calls = result.get("calls")
    return {"id": message_id, "status": "done", "outcome": result.get("outcome"), "reason": result.get("reason"),
            "answer": result.get("answer"), "calls": calls if isinstance(calls, list) else []}


def _availability(model_url: str | None) -> tuple[bool, str, str | None]:
    """(enabled, why not, the folder holding redteam/). find_spec of a top-level name looks, it
    does not import (of "redteam.naive" it would import redteam), so the agent is found as a file."""
    try:
        spec = importlib.util.find_spec("redteam")
    except (ImportError, ValueError):
        spec = None
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    agents = [folder for folder in folders if (folder / "naive" / "run.py").is_file()]
    if not agents:
        return False, "off: the naive agent is not installed here (the dashboard image ships without it)", None
    if not model_url:
        return False, "off: no model for the naive agent (set AIRLOCK_NAIVE_MODEL_URL or --naive-model-url)", None
    root = str(agents[0].resolve().parent)
    return True, "", root
