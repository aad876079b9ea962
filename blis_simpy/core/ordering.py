"""Same-time event order, made explicit (BC-4, seed E.3).

SimPy orders its event queue by (time, priority, insertion id). Its own events use priority 0
(process start, URGENT) and 1 (everything else, NORMAL): every instance event, but for the end
of a request's queueing delay, which is URGENT so that a request queued at the tick a step
starts joins that step (instance arrivals before steps). Gateway stages use negative
priorities, so at one timestamp all cluster arrivals run first, then all admission decisions,
then all routing decisions, then any instance event, and last the autoscaler's evaluations
(SCALE_CHECK); within one type, events run in the order they were scheduled (ties
follow event order, seed E.3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import NORMAL, EventPriority

from blis_simpy.core.clock import Environment
from blis_simpy.core.loop import fire_after, scheduled

CLUSTER_ARRIVAL = EventPriority(-3)
ADMISSION = EventPriority(-2)
ROUTING = EventPriority(-1)
# The autoscaler and drain hand-backs: after every instance event at the same time (E.3).
SCALE_CHECK = EventPriority(2)


class StageEvent(simpy.Event):
    """An event that fires after `delay` with a given priority (a Timeout with a priority)."""

    def __init__(self, env: Environment, delay: int, priority: EventPriority, value: Any = None,
                 callback: Callable[[simpy.Event], None] | None = None) -> None:
        super().__init__(env)
        if callback is not None:
            self.callbacks.append(callback)
        fire_after(self, delay, priority, value)


class Background(StageEvent):
    """A wake-up that brings no work by itself (an autoscaler's poll, an actuation delay, a
    fault injector's timer): with no horizon, a run ends once only these are left
    (`only_background_left`), and the processes waiting on them stop."""

    def __init__(self, env: Environment, delay: int, priority: EventPriority = NORMAL) -> None:
        super().__init__(env, delay, priority)


def only_background_left(env: Environment) -> bool:
    """Nothing but background wake-ups is scheduled: no request will come or move."""
    return all(isinstance(event, Background) for event in scheduled(env))
