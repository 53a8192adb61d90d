"""A lab's private airlock: `airlock up` on free ports, with a student's code plugged in.

The labs' in-stack checkpoints and `airlock lab run` both go through here, so that what a
student's code did is read the same way everywhere: from the stack's calls.jsonl (what
ran) and trace.jsonl (what each stage decided), never from what a model said.

Offline by default: the model is the project's hostile model (it obeys the last instruction
it finds in an email, the worst case), or the reader's recorded answers; a URL selects a
real OpenAI-compatible endpoint (the lab's SmolLM2, say).

Every .eml is signed by its From domain (a lab key made for the run, harness/mail_signing.py)
and checked by the SMTP intake's own verifier before it goes in, as a customer's mail server
and the intake would: so a guarded task's sender is proven, as in production, and an email
the verifier does not accept goes in unverified.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from airlock import keys, records, trace
from airlock.plugs import Plug
from airlock.settings import Settings
from harness.attack import PrivateStack, run_separated
from harness.campaign import CampaignEmail
from harness.hostile import HostileModel
from harness.mail_signing import signed_and_verified
from harness.score import EmailResult

EMAILS_TIMEOUT_S = 120.0  # every email of a lab's run reaches its outcome within this
IN_FLIGHT = 8


@dataclass
class Stack:
    """A running lab stack: its settings, its page (if asked for) and its files."""

    settings: Settings
    page_url: str | None
    model: str

    @property
    def calls_path(self) -> Path:
        return self.settings.calls_path

    @property
    def trace_path(self) -> Path:
        return self.settings.trace_path

    def run(self, emails: list[CampaignEmail], timeout_s: float = EMAILS_TIMEOUT_S) -> StackRun:
        emails = signed_and_verified(emails)
        # Submitted with the SMTP intake's key: the private stack's stand-in for that intake.
        results, stragglers = run_separated(emails, self.settings, timeout_s, IN_FLIGHT, lambda done, total: None,
                                            role=keys.SMTP_ROLE)
        return StackRun(results, stragglers, self.trace_events([r.id for r in results]))

    def trace_events(self, message_ids: list[str]) -> dict[str, list[records.TraceRecord]]:
        """Each email's trace records, in order: read at once (no outcome to wait for), as
        the stack has settled every one of them."""
        return trace.settled(self.trace_path, message_ids, finished=0)


@dataclass
class StackRun:
    results: list[EmailResult]
    stragglers: list[str]  # ids with no outcome by the deadline: a failed run, never ignored
    events: dict[str, list[records.TraceRecord]] = field(default_factory=dict)


@contextlib.contextmanager
def lab_stack(data_dir: Path, task: Path, *, model: str = "hostile", plug: Plug | None = None,
              catalog: Path | None = None, page: bool = False, readers: int = 1) -> Iterator[Stack]:
    """Start the stack (and the hostile model when asked for), yield it, stop both."""
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {"AIRLOCK_STUDENT_CODE": str(plug) if plug else "", "AIRLOCK_CATALOG": str(catalog or "")}
    with contextlib.ExitStack() as stack:
        model_url: str | None
        if model == "hostile":
            model_url = stack.enter_context(contextlib.closing(HostileModel().start())).url
        elif model == "recorded":
            model_url = None
        else:
            model_url = model
        private = PrivateStack(data_dir, task.resolve(), model_url, readers, env, dashboard=page)
        settings = stack.enter_context(private)
        yield Stack(settings, private.page_url, model)
