"""Anomalies an instance detects while it runs (seed D.8), written to the recorder.

At each step that admits requests from the wait queue, the requests left waiting are compared
with the ones served:
* `priority_inversion`: a request was admitted while one with a strictly higher priority (as
  the priority policy assigned it, at this time) still waits in the same queue;
* `hol_blocking` (the seed's sense): ... and that higher-priority request had queued before
  the admitted one, i.e. it was ahead of it in line and was passed over;
* `slo_class_inversion`: a request was admitted while one of a strictly more urgent SLO class
  waits: the SLO view, independent of the priority policy (a run with one class has none);
* `kv_hol_blocking`: the queue head does not fit in the free KV blocks while a request behind
  it would (head-of-line blocking caused by the strict admission order).

The two head-of-line blockings last: a request passed over, or stuck at the head, usually
stays so for many steps. Each is recorded once, as an episode (`Blocking`): from the step it
was first seen to the step its request was admitted (`hol_blocking`), or stopped being the
head of the queue (`kv_hol_blocking`), or the end of the run; with the number of steps it was
seen at. The inversions are single admissions, one record each.

Priorities that never change (a policy that does not age) are indexed in a heap, so a step
pays a heap look-up, not a scan of the queue; aging priorities are rescored every step anyway,
and then the queue is scanned.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request, State

HOL_LOOKAHEAD = 33  # requests behind the head checked for KV head-of-line blocking


def queued_before(a: Request, b: Request) -> bool:
    return (a.queued_at, a.index) < (b.queued_at, b.index)


@dataclass(slots=True)
class Blocking:
    """An open head-of-line blocking episode: `blocked` waits while `by` (the requests seen
    when it began) go or could go; `steps` counts the steps it was seen at."""

    blocked: Request
    by: list[str]
    start: int
    last: int  # the last step it was seen at
    steps: int = 1
    passers: set[str] = field(default_factory=set)  # hol_blocking: every request served past it

    def seen(self, now: int) -> None:
        if now != self.last:
            self.last = now
            self.steps += 1


class QueueWatch:
    """One instance's detector of requests served out of order."""

    def __init__(self, instance_id: str, recorder: Recorder, ranks: Mapping[str, int],
                 static_priorities: bool) -> None:
        self.instance_id = instance_id
        self.recorder = recorder
        self.ranks = ranks
        self.default_rank = ranks.get("", 0)
        self.static = static_priorities
        self.count = itertools.count()
        self.by_priority: list[tuple[float, int, Request]] = []  # (-priority, n, request)
        self.by_class: list[tuple[int, int, int, Request]] = []  # (rank, arrival, n, request)
        self.passed_over: dict[str, Blocking] = {}  # open hol_blocking episodes, by request
        self.kv_head: Blocking | None = None  # the open kv_hol_blocking episode

    def queued(self, req: Request) -> None:
        n = next(self.count)
        if self.static:
            top_of(self.by_priority)  # drop entries of requests that left the queue
            heapq.heappush(self.by_priority, (-req.priority, n, req))
        top_of(self.by_class)
        heapq.heappush(self.by_class, (self.ranks.get(req.slo_class, self.default_rank),
                                       req.arrival, n, req))

    def admitted(self, now: int, admitted: Sequence[Request], waiting: Iterable[Request]
                 ) -> None:
        """Called after a step admitted `admitted` and left `waiting` in the queue."""
        if self.passed_over:
            self._end_passed_over(now)
        top = self._highest_waiting(waiting)
        if top is not None:
            for req in admitted:
                if top.priority > req.priority:
                    self._inversion(now, req, top, waiting)
        urgent = top_of(self.by_class)
        if urgent is not None:
            rank = self.ranks.get(urgent.slo_class, self.default_rank)
            for req in admitted:
                if rank < self.ranks.get(req.slo_class, self.default_rank):
                    self.recorder.anomaly(
                        "slo_class_inversion", now, self.instance_id, [req.name, urgent.name],
                        f"{req.name} admitted while more urgent {urgent.name} waits")

    def _highest_waiting(self, waiting: Iterable[Request]) -> Request | None:
        if self.static:
            return top_of(self.by_priority)
        best = None
        for req in waiting:
            if best is None or req.priority > best.priority:
                best = req
        return best

    def _inversion(self, now: int, req: Request, top: Request, waiting: Iterable[Request]
                   ) -> None:
        record = self.recorder.anomaly
        record("priority_inversion", now, self.instance_id, [req.name, top.name],
               f"{req.name} (priority {req.priority:g}) admitted while {top.name} "
               f"(priority {top.priority:g}) waits")
        ahead = [w for w in waiting if w.priority > req.priority and queued_before(w, req)]
        if ahead:
            first = min(ahead, key=lambda w: (w.queued_at, w.index))
            episode = self.passed_over.get(first.name)
            if episode is None:
                episode = self.passed_over[first.name] = Blocking(first, [req.name], now, now)
            elif episode.start == now:
                episode.by.append(req.name)
            episode.passers.add(req.name)
            episode.seen(now)

    def _end_passed_over(self, now: int) -> None:
        """Record the hol_blocking episodes whose request has been admitted (at `now`)."""
        for name, episode in list(self.passed_over.items()):
            if episode.blocked.state is not State.QUEUED:
                del self.passed_over[name]
                self._record_passed_over(episode, now, "")

    def _record_passed_over(self, episode: Blocking, end: int, suffix: str) -> None:
        blocked = episode.blocked.name
        self.recorder.anomaly(
            "hol_blocking", episode.start, self.instance_id, [blocked, *episode.by],
            f"{blocked} passed over by {len(episode.passers)} lower-priority requests behind "
            f"it, at {episode.steps} steps{suffix}", end)

    def kv_blocked(self, now: int, head: Request, behind: Request) -> None:
        """The head `head` does not fit in the free KV blocks while `behind` would."""
        episode = self.kv_head
        if episode is not None and episode.blocked is head:
            episode.seen(now)
            return
        if episode is not None:
            self._record_kv_head(episode, now, "")
        self.kv_head = Blocking(head, [behind.name], now, now)

    def head_is(self, now: int, head: Request | None) -> None:
        """After a step's admissions: the open kv_hol_blocking episode ends when its request
        is no longer the head of the queue (admitted, or another request put before it)."""
        episode = self.kv_head
        if episode is not None and episode.blocked is not head:
            self.kv_head = None
            self._record_kv_head(episode, now, "")

    def _record_kv_head(self, episode: Blocking, end: int, suffix: str) -> None:
        head = episode.blocked.name
        self.recorder.anomaly(
            "kv_hol_blocking", episode.start, self.instance_id, [head, *episode.by],
            f"{head} waits at the head for KV blocks while {episode.by[0]} behind it fits, at "
            f"{episode.steps} steps{suffix}", end)

    def finish(self, now: int) -> None:
        """The run is over: the episodes still open end at `now`, unfinished."""
        self._end_all(now, "; still blocked when the run ended")

    def emptied(self, now: int) -> None:
        """The instance failed: its queue is gone, and the episodes still open end at `now`."""
        self._end_all(now, "; the instance failed")
        self.by_priority.clear()
        self.by_class.clear()

    def _end_all(self, now: int, suffix: str) -> None:
        if self.kv_head is not None:
            self._record_kv_head(self.kv_head, now, suffix)
            self.kv_head = None
        for episode in self.passed_over.values():
            self._record_passed_over(episode, now, suffix)
        self.passed_over.clear()


def top_of(heap: list) -> Request | None:
    """The first still-waiting request of a lazily cleaned heap (entries of requests that left
    the queue are dropped when they reach the top)."""
    while heap and heap[0][-1].state is not State.QUEUED:
        heapq.heappop(heap)
    return heap[0][-1] if heap else None
