"""No email waits for ever for a stage nobody serves.

Data: the flights no worker holds, the roles with no worker connected or heard from
(broker.workers: unserved_since), AIRLOCK_NO_WORKER_WAIT_S.
Readers: the Router's tick (ends such emails `failed`, saying so) and the intake's Status
(`waiting`: what waits that way, per stage, and what waits to be sent again).
Rationale: an email waiting for a worker has no deadline (a deadline starts when a worker
takes it), so a killed actor that nothing restarts left emails with no outcome and no sign
of one. While a worker of the stage is heard from, however busy, its deadlines judge what
it holds and the rest waits its turn. An escalated email waits for a person, not a
worker, and is never ended so.
"""

from __future__ import annotations

import collections

from airlock.wire import Waiting
from broker.lifecycle import Lifecycle
from broker.workers import Workers


class Unserved:
    def __init__(self, lifecycle: Lifecycle, workers: Workers) -> None:
        self.lifecycle, self.workers = lifecycle, workers
        self.settings = lifecycle.settings
        self._next_check = 0.0  # when end() looks next

    def end(self, now: float) -> None:
        """End `failed` each email that has waited no_worker_wait_s for a stage with no
        worker connected or heard from (Workers.unserved_since).

        A stage with a worker heard from is never judged here: a busy worker's emails wait
        their turn and its deadlines judge what it holds. Nor is an email a registered
        worker still holds a delivery of, its deadline passed (Workers.copies_held): ended
        now, it could still act when that worker runs again, after its outcome; it waits,
        shown, to be sent again. An escalated email waits for a person. One still on disk
        (a recovery backlog) is judged once read back. Looked at once a heartbeat interval
        at most, and not before the first email could be due, so a stage with no worker
        costs a pass over the flights only once one is (measured: under 50 ms a pass with
        100,000 waiting)."""
        wait = self.settings.no_worker_wait_s
        if not wait or now < self._next_check:
            return
        self._next_check = now + self.settings.heartbeat_interval_s
        since = {role: self.workers.unserved_since(role, now) for role in self.workers.of}
        unserved = {role: at for role, at in since.items() if at is not None}
        if not unserved:
            return
        # When the next email could be due: one at an unserved stage no sooner than its
        # stage's `since` plus the wait; one at a stage served now (heard from within
        # liveness) no sooner than `soonest`. Until then no pass over the flights is needed.
        soonest = now + wait - self.workers.silent_after_s
        earliest = min(unserved.values()) + wait
        if now < earliest:
            self._next_check = max(self._next_check, min(earliest, soonest))
            return
        copies = self.workers.copies_held()
        for flight in [f for f in self.lifecycle.flights.values() if f.stage in unserved and f.worker is None
                       and f.message is not None and f.message_id not in copies]:
            waited = now - max(unserved[flight.stage], flight.queued_at)
            if waited < wait:
                soonest = min(soonest, now + wait - waited)
                continue
            before = (f"; delivered {flight.attempts} times before (its {flight.stage} was lost or missed its "
                      "deadline)" if flight.attempts else "")
            self.lifecycle.counters[f"no_worker.{flight.stage}"] += 1
            self.lifecycle.finish(flight, "failed", f"no {flight.stage} was connected, or heard from, to take it "
                                                    f"for {waited:.0f} s (AIRLOCK_NO_WORKER_WAIT_S is {wait:g} s)"
                                                    f"{before}", now, no_worker_s=round(waited, 3))
        self._next_check = max(self._next_check, soonest)

    def waiting(self, now: float) -> dict[str, Waiting]:
        """Per stage, the emails no worker holds that are stuck: no worker of the stage is
        connected or heard from, or they wait to be sent again. A stage with neither is
        left out, so while mail flows the Status carries none (wire.Status). One pass over
        the flights: a Ping is an operator's question, not a per-message cost."""
        found: dict[str, dict[str, float]] = {}
        since = {role: self.workers.unserved_since(role, now) for role in self.workers.of}
        copies = self.workers.copies_held()
        for flight in self.lifecycle.flights.values():
            if flight.worker is not None or flight.stage not in self.workers.of or flight.message is None:
                continue  # held, escalated, or still on disk (a recovery backlog, see Lifecycle.defer)
            unserved = since[flight.stage] if flight.message_id not in copies else None
            if unserved is None and not flight.attempts:
                continue  # ordinary mail in the queue of a served stage
            counts = found.setdefault(flight.stage, collections.defaultdict(float))
            if unserved is not None:
                counts["no_worker"] += 1
                counts["no_worker_s"] = max(counts["no_worker_s"], now - max(unserved, flight.queued_at))
            if flight.attempts:
                counts["redelivery"] += 1
                counts["redelivery_s"] = max(counts["redelivery_s"], now - flight.retry_since)
        limit = self.settings.no_worker_wait_s
        return {stage: Waiting(no_worker=int(c["no_worker"]), no_worker_s=round(c["no_worker_s"], 3),
                               limit_s=limit if c["no_worker"] else 0.0, redelivery=int(c["redelivery"]),
                               redelivery_s=round(c["redelivery_s"], 3))
                for stage, c in sorted(found.items())}
