"""The release of a known workload: each request handed to the gateway at its arrival time.

A callback chain rather than a SimPy process: the same events (a start event at time 0 with
the priority SimPy gives a process start, then one cluster-arrival event per arrival time) in
the same order, without resuming a generator through SimPy's interpreted `Process` once per
arrival. Compiled (setup.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import simpy

from blis_simpy.core.clock import Environment
from blis_simpy.core.loop import start_now
from blis_simpy.core.ordering import CLUSTER_ARRIVAL, StageEvent
from blis_simpy.core.request import Request


class Release:
    """Hands each request over at its arrival time; it wakes with cluster-arrival priority,
    ahead of instance events at that time. A request is handed over `alone` when the next one
    is handed over later (the gateway may then take its zero-latency stages at once: all of
    one time's arrivals still come before any of their admissions)."""

    def __init__(self, env: Environment, requests: Iterable[Request],
                 deliver: Callable[[Request, bool], None]) -> None:
        self.env = env
        self.requests = requests
        self.ahead: Iterator[Request] = iter(())
        self.deliver = deliver
        self.next: Request | None = None
        start_now(env, self._start)

    def _start(self, event: simpy.Event) -> None:
        self.ahead = iter(self.requests)
        self.next = next(self.ahead, None)
        self._release(event)

    def _release(self, event: simpy.Event) -> None:
        """Hand over every request due now; then wait for the next arrival time."""
        env, ahead, deliver = self.env, self.ahead, self.deliver
        now = env.now
        req = self.next
        while req is not None:
            if req.arrival > now:
                self.next = req
                StageEvent(env, req.arrival - now, CLUSTER_ARRIVAL, callback=self._release)
                return
            following = next(ahead, None)
            deliver(req, following is None or following.arrival > now)
            req = following
        self.next = None
