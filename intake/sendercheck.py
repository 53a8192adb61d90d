"""Each sender check in a worker process, within a time budget: no email holds another's reply.

Data: the raw email and its SMTP client's address, handed to Verifier.authenticate.
Readers: intake/app.py's DATA hook, once per email.
Rationale: intake/headerblock.py bounds the work it knows of, but a check still runs
dkimpy and RSA on hostile bytes and may wait on DNS. Run in the intake's own process, a
costly check held a thread of the event loop's executor and the interpreter lock: six at
once delayed an ordinary sender's 250 by 200 s. So checks run in worker processes, forked
from a small server started with the intake (multiprocessing's forkserver, with dkimpy
loaded once), at most MAX_CHECKS_AT_ONCE at a time; the event loop waits for a worker's
answer without a thread. A worker that has not answered within the budget is killed (a
worker is never asked again once it missed an answer), and its email goes on with proof
"none", the reason naming the budget: never a hang, never a crash of the intake. Workers
are started as they are needed and kept: a check costs about 2 ms, not a process start.
The intake must run as `python -m intake` (as every launcher here does): a worker then
imports nothing of the main module's.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.connection import Connection

from intake.authentication import Sender, Verifier

MAX_CHECKS_AT_ONCE = 8  # children at a time; compose caps the intake at 64 processes
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["intake.authentication"])  # each child starts with dkimpy imported


def start_server() -> None:
    """Start the fork server now (about 0.3 s), not on the first email."""
    from multiprocessing import forkserver

    forkserver.ensure_running()


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, verify: Verifier) -> None:
        self.pipe, theirs = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(target=_serve, args=(verify, theirs), daemon=True)
        try:
            self.process.start()
        finally:
            theirs.close()  # the worker holds its copy: EOF here once it ends

    def stop(self) -> None:
        self.pipe.close()
        if self.process.pid is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join()


class SenderCheck:
    def __init__(self, verify: Verifier, budget_s: float, at_once: int = MAX_CHECKS_AT_ONCE) -> None:
        self.verify, self.budget_s = verify, budget_s
        self._slots = asyncio.Semaphore(at_once)
        self._idle: list[_Worker] = []

    async def authenticate(self, raw: bytes, peer: str) -> Sender:
        """Verifier.authenticate(raw, peer) in a worker, or proof none once the budget is spent."""
        if self.verify.max_bytes and len(raw) > self.verify.max_bytes:
            return self.verify.authenticate(raw, peer)  # refused unread, at once: not worth a pipe
        async with self._slots:
            try:
                worker = self._idle.pop() if self._idle else _Worker(self.verify)
            except OSError as exc:  # no room for another process (a pids limit): no proof, not a crash
                return Sender("", "none", f"the sender check could not start: {exc.strerror or exc}")
            found = await self._ask(worker, raw, peer)
            if isinstance(found, Sender):
                self._idle.append(worker)
                return found
            worker.stop()
            return Sender("", "none", found)

    async def _ask(self, worker: _Worker, raw: bytes, peer: str) -> Sender | str:
        """The worker's answer, or why there is none."""
        loop = asyncio.get_running_loop()
        try:
            worker.pipe.send((raw, peer))
        except OSError:
            return "the sender check's worker had ended: nothing proven"
        readable = loop.create_future()
        loop.add_reader(worker.pipe.fileno(), _settle, readable)
        try:
            await asyncio.wait_for(readable, self.budget_s)
        except TimeoutError:
            return f"the sender check ran over its budget of {self.budget_s:g} s: stopped, nothing proven"
        finally:
            loop.remove_reader(worker.pipe.fileno())
        try:
            found: Sender = worker.pipe.recv()
        except (EOFError, OSError):
            return "the sender check ended without an answer: nothing proven"
        return found

    def close(self) -> None:
        """Stop the idle workers (a busy one ends with its check: it is killed or answers)."""
        while self._idle:
            self._idle.pop().stop()


def _settle(readable: asyncio.Future[None]) -> None:
    if not readable.done():
        readable.set_result(None)


def _serve(verify: Verifier, pipe: Connection) -> None:
    """The worker: one check per request, until the intake closes its end."""
    while True:
        try:
            raw, peer = pipe.recv()
        except EOFError:
            return
        pipe.send(verify.authenticate(raw, peer))
