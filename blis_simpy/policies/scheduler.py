"""Instance schedulers: the wait-queue order each step, and which running request to preempt.

Only instance-local state is visible (seed D.7): a request's read-only view (no output length)
and its current priority. The sort is stable, so equal keys keep queue order (preempted
requests first). Request ids compare as strings, like the reference.
Templates: fcfs, priority-fcfs, sjf, reverse-priority (pathological); preemption victim
`lifo` (the last admitted, vLLM's rule) or `lowest-priority`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from blis_simpy.core.request import RequestView
from blis_simpy.core.schema import spec
from blis_simpy.policies.registry import Registry


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    preemption: Literal["lifo", "lowest-priority"] = spec(
        "lifo", help="victim under KV pressure: last admitted, or lowest priority (then last)"
    )


class InstanceScheduler:
    """`order_key(view, priority)` sorts the wait queue each step (None keeps arrival order);
    `victim` picks the running request to preempt."""

    name = "custom"
    Params = SchedulerParams
    order_key: Callable[[RequestView, float], Any] | None = None
    uses_priority = False

    def __init__(self, params: SchedulerParams) -> None:
        self.params = params
        if params.preemption == "lowest-priority":
            self.uses_priority = True

    def victim(self, candidates: Sequence[RequestView], priorities: Sequence[float]) -> int:
        """Position among `candidates` (running requests in admission order, with their
        current priorities) of the request to preempt."""
        if self.params.preemption == "lifo":
            return len(candidates) - 1
        lowest = min(priorities)
        return max(i for i, p in enumerate(priorities) if p == lowest)


SCHEDULER: Registry[InstanceScheduler] = Registry("scheduler", InstanceScheduler)


@SCHEDULER.register("fcfs")
class FCFS(InstanceScheduler):
    """Queue order as it stands: arrival order, preempted requests at the front."""


@SCHEDULER.register("priority-fcfs")
class PriorityFCFS(InstanceScheduler):
    uses_priority = True

    @staticmethod
    def order_key(r: RequestView, priority: float) -> tuple[float, int, str]:
        return (-priority, r.arrival_us, r.id)


@SCHEDULER.register("sjf")
class ShortestJobFirst(InstanceScheduler):
    """Shortest prompt first (output lengths are unknown to a real scheduler)."""

    @staticmethod
    def order_key(r: RequestView, priority: float) -> tuple[int, int, str]:
        return (r.input_tokens, r.arrival_us, r.id)


@SCHEDULER.register("reverse-priority")
class ReversePriority(InstanceScheduler):
    """Lowest priority first (pathological)."""

    uses_priority = True

    @staticmethod
    def order_key(r: RequestView, priority: float) -> tuple[float, int, str]:
        return (priority, r.arrival_us, r.id)
