"""Instance schedulers: the wait-queue order each step, and which running request to preempt.

Only instance-local state is visible (seed D.7): a request's read-only view (no output length)
and its current priority. The sort is stable, so equal keys keep queue order (preempted
requests first). Request ids compare as strings, like the reference.
Templates: fcfs, priority-fcfs, sjf, reverse-priority (pathological); preemption victim
`lifo` (the last admitted, vLLM's rule) or `lowest-priority`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from blis_simpy.core.request import RequestView
from blis_simpy.core.schema import spec
from blis_simpy.policies.registry import Registry


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    preemption: Literal["lifo", "lowest-priority"] = spec(
        "lifo", help="victim under KV pressure: last admitted, or lowest priority (then last)"
    )


@dataclass(frozen=True, slots=True)
class SchedulerContext:
    """What `make_batch` and `on_request_arrival` see of their instance (seed G.1's
    SchedulerContext): the wait queue (after `order_key`'s sort) with each request's priority
    and hints, the running batch, the free KV blocks, the clock (µs), the slots left for new
    requests and the step's token budget left after the running requests."""

    wait_queue: tuple[RequestView, ...]
    priorities: tuple[float, ...]
    hints: tuple[Mapping[str, object], ...]
    running: tuple[RequestView, ...]
    free_kv_blocks: int
    clock: int
    max_batch_size: int
    max_token_budget: int


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """`make_batch`'s answer (seed G.1's BatchDecision): positions in `wait_queue` of the
    requests to admit this step, in the order to try them (the engine still stops at the
    first that the slots, the budget or the KV cache cannot take, as it does for the queue
    head); `chunk_sizes` optionally caps a position's prefill chunk (tokens, at least 1);
    `victims`, positions in `running` of requests to preempt first (seed G.1's
    PreemptionVictim, any number): their KV is freed, their share of this step's budget
    comes back, and they wait at the queue's head to be computed again. Preemption under KV
    pressure stays `victim`'s choice."""

    to_schedule: tuple[int, ...]
    chunk_sizes: Mapping[int, int] = field(default_factory=dict)
    victims: tuple[int, ...] = ()


class InstanceScheduler:
    """`order_key(view, priority)` sorts the wait queue each step (None keeps arrival order);
    `victim` picks the running request to preempt. Seed G.1's hooks, None unless a scheduler
    defines them (then they cost nothing): `make_batch(ctx) -> BatchDecision`, at each step
    with requests waiting, chooses which of them to admit, their prefill chunks and which
    running requests to preempt for them (by default the engine admits from the sorted
    queue's head); `on_request_arrival(view, ctx)` is told of each request that joins the
    instance's queue, at the first step after it arrives."""

    name = "custom"
    Params = SchedulerParams
    order_key: Callable[[RequestView, float], Any] | None = None
    make_batch: Callable[[SchedulerContext], BatchDecision] | None = None
    on_request_arrival: Callable[[RequestView, SchedulerContext], None] | None = None
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
