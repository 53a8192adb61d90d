"""The workers of each role: the credit each has left, and whether it is alive.

Data: each worker's Hello (the credit it asks for), every frame it sends (a sign of life),
the work handed to it and the results it returns.
Readers: the Router (who joins, who is lost), broker.dispatch (who may take work now),
broker.unserved (whether a stage is served at all).
Rationale: work is pulled, not pushed. A Hello grants credit, one token in `ready` per
message the worker may hold; each result returns one, and the broker never sends a worker
more than its credit, so a ROUTER's high-water mark never limits a queue and nothing is
dropped there. A worker heard from within `silent_after_s` (heartbeat interval x liveness)
is alive; an idle one silent for longer is gone, and a busy one is judged by its stage
deadline instead (it may be inside a slow model call).
A worker process is one worker however often it reconnects: each new socket is a new
identity here, so its Hello names the process and numbers the connection (wire.Hello). The
newest connection of a name replaces the one known (its work goes back to the queue), and an
older one's Hello, left queued at the broker from before the worker closed it (a broker too
busy to answer for a while sees several), is stale: it registers nothing, and nothing is
ever sent to a connection that is gone.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MAX_CREDIT = 10_000  # a Hello asking for more is granted this many


@dataclass(frozen=True)
class Connection:
    """What a new connection's Hello is to the worker that sent it: `stale` (an older
    connection than one already known: ignore it), or new, replacing the identity of its
    worker's connection known until now (`replaces`; None for a worker new here)."""

    stale: bool = False
    replaces: bytes | None = None


@dataclass
class Worker:
    identity: bytes
    credit: int
    last_seen: float = 0.0
    assigned: set[str] = field(default_factory=set)
    suspect: str | None = None  # a redelivered email it holds alone (see broker.dispatch)
    name: str = ""  # its worker's name across reconnects (wire.Hello); "" if it gave none


class Workers:
    def __init__(self, roles: Iterable[str], silent_after_s: float) -> None:
        self.silent_after_s = silent_after_s
        # role -> identity -> Worker: the Router shows this as Router.workers.
        self.of: dict[str, dict[bytes, Worker]] = {role: {} for role in roles}
        # One token per message a worker may take now; a lost worker's tokens stay, skipped.
        self.ready: dict[str, collections.deque[bytes]] = {role: collections.deque() for role in self.of}
        # When each role's last worker left (0.0: none yet, so an email's own queued_at is
        # the later; see broker.unserved).
        self.left_at: dict[str, float] = dict.fromkeys(self.of, 0.0)
        # role -> worker name -> (its newest connection's number, that connection's identity).
        self.named: dict[str, dict[str, tuple[int, bytes]]] = {role: {} for role in self.of}

    def seen(self, role: str, identity: bytes, now: float) -> None:
        """Any frame is a sign of life (a client's role has no workers: nothing to note)."""
        worker = self.of.get(role, {}).get(identity)
        if worker is not None:
            worker.last_seen = now

    def join(self, role: str, identity: bytes, credit: int, now: float, name: str = "") -> int | None:
        """A Hello: the credit granted to a new worker, or None for one already known (a
        heartbeat: its credit is already counted)."""
        if identity in self.of[role]:
            return None
        credit = max(1, min(credit, MAX_CREDIT))
        self.of[role][identity] = Worker(identity, credit, last_seen=now, name=name)
        self.ready[role].extend([identity] * credit)
        return credit

    def connect(self, role: str, identity: bytes, name: str, number: int) -> Connection:
        """A Hello from `identity`, not known yet, naming its worker and connection number.
        A worker that names none is one worker per connection (a new one)."""
        if not name:
            return Connection()
        known = self.named[role].get(name)
        if known is not None and known[0] >= number:
            return Connection(stale=True)
        self.named[role][name] = (number, identity)
        return Connection(replaces=known[1] if known is not None else None)

    def lose(self, role: str, identity: bytes, now: float) -> Worker | None:
        """Forget a worker (silent or its connection gone); it is returned with what it held."""
        worker = self.of[role].pop(identity, None)
        if worker is not None and not self.of[role]:
            self.left_at[role] = now
        if worker is not None and worker.name and self.named[role].get(worker.name, (0, b""))[1] == identity:
            del self.named[role][worker.name]
        return worker

    def silent_idle(self, now: float) -> list[tuple[str, bytes]]:
        """Workers holding nothing and heard from no more: gone. A silent busy one may be
        inside a slow model call: its stage deadline judges it, and a crashed one is caught
        sooner, when the next heartbeat to it finds its connection closed."""
        return [(role, identity) for role, workers in self.of.items() for identity, worker in workers.items()
                if now - worker.last_seen > self.silent_after_s and not worker.assigned]

    def assign(self, worker: Worker, message_id: str, suspect: bool) -> None:
        """`worker` takes one message (its token was taken from `ready` by broker.dispatch)."""
        worker.assigned.add(message_id)
        if suspect:
            worker.suspect = message_id

    def returned(self, role: str, identity: bytes, message_id: str) -> None:
        """A result: the worker holds that message no more and gets its credit back. A
        result for a message it does not hold (late, or never its own) returns nothing."""
        worker = self.of[role].get(identity)
        if worker is not None and message_id in worker.assigned:
            worker.assigned.discard(message_id)
            self.ready[role].append(identity)
            if worker.suspect == message_id:
                worker.suspect = None

    def unserved_since(self, role: str, now: float) -> float | None:
        """Since when no worker of `role` has been heard from: when its last one left, or
        the last frame of any, once that is older than heartbeat liveness (a worker that
        silent, holding work so never buried, is paused or hung: as good as gone). None
        while one is heard from. A worker in a slow call is silent too, but answers or
        says Hello well within AIRLOCK_NO_WORKER_WAIT_S, and that starts the wait again."""
        workers = self.of[role]
        if not workers:
            return self.left_at[role]
        heard = max(w.last_seen for w in workers.values())
        return heard if now - heard > self.silent_after_s else None

    def copies_held(self) -> set[str]:
        """Ids a worker still registered holds a delivery of, its deadline passed or not: a
        silent worker (paused) may still act on it when it runs again."""
        return {message_id for workers in self.of.values() for worker in workers.values()
                for message_id in worker.assigned}

    def counts(self) -> dict[str, int]:
        return {role: len(workers) for role, workers in self.of.items()}

    def everyone(self) -> Iterator[tuple[str, bytes]]:
        """Every worker, by role, as a heartbeat goes to each."""
        for role, workers in self.of.items():
            for identity in workers:
                yield role, identity
