"""Anomalies an instance detects while it runs (seed D.8), written to the recorder.

At each step that admits requests from the wait queue, the requests left waiting are compared
with the ones served:
* `priority_inversion`: a request was admitted while one with a strictly higher priority (as
  the priority policy assigned it, at this time) still waits in the same queue;
* `hol_blocking` (the seed's sense): ... and that higher-priority request had queued before
  the admitted one, i.e. it was ahead of it in line and was passed over;
* `slo_class_inversion`: a request was admitted while one of a more urgent SLO class (or the
  same class and an earlier arrival) waits: the SLO view, independent of the priority policy;
* `kv_hol_blocking`: the queue head does not fit in the free KV blocks while a request behind
  it would (head-of-line blocking caused by the strict admission order).

Priorities that never change (a policy that does not age) are indexed in a heap, so a step
pays a heap look-up, not a scan of the queue; aging priorities are rescored every step anyway,
and then the queue is scanned.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence

from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request, State

HOL_LOOKAHEAD = 33  # requests behind the head checked for KV head-of-line blocking


def queued_before(a: Request, b: Request) -> bool:
    return (a.queued_at, a.index) < (b.queued_at, b.index)


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
        top = self._highest_waiting(waiting)
        if top is not None:
            for req in admitted:
                if top.priority > req.priority:
                    self._inversion(now, req, top, waiting)
        urgent = top_of(self.by_class)
        if urgent is not None:
            rank, arrival = self.ranks.get(urgent.slo_class, self.default_rank), urgent.arrival
            for req in admitted:
                if (rank, arrival) < (self.ranks.get(req.slo_class, self.default_rank),
                                      req.arrival):
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
            record("hol_blocking", now, self.instance_id, [first.name, req.name],
                   f"{first.name} waits while lower-priority {req.name}, behind it in line, "
                   "is served")

    def kv_blocked(self, now: int, head: Request, behind: Request) -> None:
        self.recorder.anomaly("kv_hol_blocking", now, self.instance_id,
                              [head.name, behind.name],
                              f"{head.name} waits for KV blocks; {behind.name} fits")


def top_of(heap: list) -> Request | None:
    """The first still-waiting request of a lazily cleaned heap (entries of requests that left
    the queue are dropped when they reach the top)."""
    while heap and heap[0][-1].state is not State.QUEUED:
        heapq.heappop(heap)
    return heap[0][-1] if heap else None
