"""Which worker takes which waiting email: ordinary work by credit, suspects alone.

Data: the lanes of waiting work (broker.lifecycle: pending and retry, per role) and the
workers' credit tokens (broker.workers: ready).
Readers: the Router, after every message and every tick.
Rationale: a redelivered email may be what killed its worker (a memory bomb). It waits in
its own lane, goes alone to a worker holding nothing, and such suspects hold at most half
of a role's workers, so ordinary mail never waits behind them (see _suspects). The usual
case, on every message, is that nothing can move: that check stays cheap.
"""

from __future__ import annotations

from broker.lifecycle import Flight, Lifecycle, Work
from broker.outbox import Outbox
from broker.workers import Worker, Workers


class Dispatch:
    def __init__(self, workers: Workers, lifecycle: Lifecycle, out: Outbox) -> None:
        self.workers, self.lifecycle, self.out = workers, lifecycle, out
        # The worker of each role that takes no ordinary work until it holds nothing, for a suspect.
        self.draining: dict[str, bytes | None] = dict.fromkeys(workers.of)

    def __call__(self, now: float) -> None:
        flights = self.lifecycle.flights
        for role, pending in self.lifecycle.pending.items():
            ready, workers = self.workers.ready[role], self.workers.of[role]
            if ready and (self.lifecycle.retry[role] or self.draining[role] is not None):
                self._suspects(role, now)
            if not (pending and ready):
                continue  # the usual case, on every message: keep it cheap
            passed_over: list[bytes] = []
            while pending and ready:
                identity = ready.popleft()
                worker = workers.get(identity)
                if worker is None:
                    continue  # a token left by a worker that has gone
                flight = flights.get(pending[0].message_id)
                if flight is None or flight.stage != role:
                    pending.popleft()  # stale: that email moved on or ended meanwhile
                    ready.appendleft(identity)
                    continue
                if worker.suspect is not None or identity == self.draining[role]:
                    passed_over.append(identity)  # it holds a suspect, or empties for one
                    continue
                self._send(role, worker, pending.popleft(), flight, now)
            ready.extendleft(reversed(passed_over))

    def _suspects(self, role: str, now: float) -> None:
        """Redelivered work, each alone to a worker holding nothing, which gets nothing more
        until it answers: one poisonous email then fails alone, not with a whole credit of
        others. Suspects hold at most half the role's workers that are alive now, rounded
        down, so the others keep serving ordinary mail while a poison email kills its way
        to `max_attempts`. A lone worker takes a suspect when no ordinary mail waits, or
        once the suspect has waited a stage deadline: under a steady flood it is not
        starved. If no worker is empty, the least busy stops taking ordinary work until it
        is (draining)."""
        retry, ready, workers = self.lifecycle.retry[role], self.workers.ready[role], self.workers.of[role]
        holding = sum(1 for w in workers.values() if w.suspect is not None)
        while retry:
            flight = self.lifecycle.flights.get(retry[0].message_id)
            if flight is None or flight.stage != role or flight.worker is not None:
                retry.popleft()  # stale: it ended (or moved on) while it waited
                continue
            waited = now - flight.retry_since >= self.lifecycle.deadline_s[role]
            if holding >= (len(workers) // 2 or (0 if self.lifecycle.pending[role] and not waited else 1)):
                break
            idle = next((w for w in workers.values() if not w.assigned and w.suspect is None
                         and w.identity in ready), None)
            if idle is None:
                if self.draining[role] not in workers:
                    free = [w for w in workers.values() if w.suspect is None]
                    self.draining[role] = min(free, key=lambda w: len(w.assigned)).identity if free else None
                return
            ready.remove(idle.identity)
            self._send(role, idle, retry.popleft(), flight, now, suspect=True)
            holding += 1
        self.draining[role] = None  # nothing more to place now: no worker should idle for it

    def _send(self, role: str, worker: Worker, message: Work, flight: Flight, now: float,
              suspect: bool = False) -> None:
        self.lifecycle.delivered(flight, role, worker.identity, now)
        self.workers.assign(worker, message.message_id, suspect)
        self.out.send(role, worker.identity, message)
