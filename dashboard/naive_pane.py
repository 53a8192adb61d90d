"""The naive pane: each email injected from the page, also given to the naive agent.

The naive agent (redteam/naive/) hands the model the email *and* the tools, and runs whatever
calls come back: the design airlock exists to avoid. The dashboard never imports it (nor
anything of `redteam`). It reaches it one of two ways:
- over HTTP (AIRLOCK_NAIVE_URL, the compose lab): the naive service
  (`python -m redteam.naive.service`, its own container, model and call log) is POSTed each
  email, and its GET /about says which model it has and why, shown in the pane;
- as a subprocess (AIRLOCK_NAIVE_MODEL_URL or --naive-model-url, `airlock up --dashboard`):
  `airlock naive` (`python -m airlock naive`) per email, with the email in a temporary file
  and its own temporary data folder (so its calls.jsonl never mixes with airlock's), and the
  one JSON line it prints read back. This needs the redteam package beside the dashboard;
  the dashboard's container image ships without it, so there, with no service URL either,
  the pane says it is off and why.
Either way at most MAX_PARALLEL emails are with the naive agent at once and MAX_WAITING
wait; what comes back is data, shown with the board's escaping (dashboard/state.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airlock import httpdeadline
from airlock.interpreter import python_command
from dashboard.state import shown

MAX_PARALLEL = 2  # naive runs at once; the rest wait their turn
MAX_WAITING = 16  # beyond this, an injected email is not given to the naive agent
EXTRA_TIMEOUT_S = 30.0  # on top of the model timeout: interpreter start, imports, tools
# Over HTTP: the service runs one email at a time, so one of ours may wait for one run first.
SERVICE_RUNS_WAITED = 2
MAX_ANSWER_BYTES = 1024 * 1024  # the service's JSON answer; more is no answer
ABOUT_TIMEOUT_S = 5.0
ABOUT_RETRY_S = 5.0  # the service may start after the page: asked again this often until it answers
ABOUT_TEXT_LIMIT = 300  # characters of the service's model name and reason shown
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}\Z")  # the ids the service takes as X-Airlock-Id


class NaivePane:
    def __init__(self, model_url: str | None, model_timeout_s: float, env: dict[str, str] | None = None,
                 service_url: str | None = None) -> None:
        self.model_url = model_url
        self.service_url = service_url.rstrip("/") if service_url else None
        self.timeout_s = model_timeout_s + EXTRA_TIMEOUT_S
        root = None
        if self.service_url is not None:
            self.enabled, self.reason = True, ""
            self.timeout_s = SERVICE_RUNS_WAITED * model_timeout_s + EXTRA_TIMEOUT_S
        else:
            self.enabled, self.reason, root = _availability(model_url)
        self.about: dict[str, Any] | None = None  # the service's GET /about, once it answered
        self.env = dict(os.environ if env is None else env)
        if root is not None:  # the subprocess runs in a temporary folder: tell it where redteam/ is
            self.env["PYTHONPATH"] = os.pathsep.join(p for p in (root, self.env.get("PYTHONPATH", "")) if p)
        self._slots = asyncio.Semaphore(MAX_PARALLEL)
        self._waiting = 0

    def describe(self) -> dict[str, Any]:
        """Whether the pane is on and why not; over HTTP, which model the service has and why
        (None until it answered GET /about)."""
        described: dict[str, Any] = {"enabled": self.enabled, "reason": self.reason}
        if self.service_url is not None:
            described.update(via="service", about=self.about)
        return described

    async def watch_about(self, changed: Callable[[], None]) -> None:
        """Ask the service's GET /about until it answers, then call `changed` (the page is told)."""
        if self.service_url is None:
            return
        while self.about is None:
            self.about = await asyncio.to_thread(fetch_about, self.service_url)
            if self.about is None:
                await asyncio.sleep(ABOUT_RETRY_S)
        changed()

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
        if self.service_url is not None:
            return await asyncio.to_thread(post_email, self.service_url, message_id, raw, fmt, self.timeout_s)
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


def post_email(service_url: str, message_id: str, raw: bytes, fmt: str, timeout_s: float) -> dict[str, Any]:
    """POST one email to the naive service's /run; its answer as a pane entry, never raising.
    Blocking (within `timeout_s`, whatever the service does): run it in a thread."""
    headers = {"X-Airlock-Format": fmt, "Content-Type": "application/octet-stream"}
    if ID_PATTERN.match(message_id):  # its calls.jsonl then names the email as the page does
        headers["X-Airlock-Id"] = message_id
    answer = httpdeadline.request("POST", f"{service_url}/run", timeout_s, body=raw, headers=headers,
                                  max_body_bytes=MAX_ANSWER_BYTES)
    if isinstance(answer, httpdeadline.Unanswered):
        return {"id": message_id, "status": "error", "reason": f"the naive service: {answer.kind}: {answer.detail}"}
    if answer.status == 503:
        return {"id": message_id, "status": "skipped", "reason": "the naive agent is busy; not run"}
    if answer.status != 200:
        return {"id": message_id, "status": "error",
                "reason": f"the naive service answered {answer.status} {answer.reason}"}
    if answer.body is None:
        return {"id": message_id, "status": "error",
                "reason": f"the naive service answered over {MAX_ANSWER_BYTES} bytes"}
    return parse_output(message_id, 0, answer.body, b"")


def fetch_about(service_url: str) -> dict[str, Any] | None:
    """The service's GET /about as the pane shows it (escaped, bounded); None if it did not answer one."""
    answer = httpdeadline.request("GET", f"{service_url}/about", ABOUT_TIMEOUT_S, max_body_bytes=64 * 1024)
    if not isinstance(answer, httpdeadline.Answered) or answer.status != 200 or answer.body is None:
        return None
    try:
        about = json.loads(answer.body)
    except ValueError:
        return None
    if not isinstance(about, dict) or not isinstance(about.get("model"), str):
        return None
    return {"model": shown(about["model"][:ABOUT_TEXT_LIMIT]), "constrained": about.get("constrained") is True,
            "why": shown(str(about.get("why") or "")[:ABOUT_TEXT_LIMIT]),
            "task": shown(str(about.get("task") or "")[:ABOUT_TEXT_LIMIT])}


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
        return False, ("off: the naive agent is not installed here (the dashboard image ships without it; "
                       "set AIRLOCK_NAIVE_URL to a naive service)"), None
    if not model_url:
        return False, ("off: no naive agent (set AIRLOCK_NAIVE_URL to a naive service, or AIRLOCK_NAIVE_MODEL_URL "
                       "or --naive-model-url to run it here)"), None
    root = str(agents[0].resolve().parent)
    return True, "", root
