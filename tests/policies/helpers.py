"""Hand-built inputs for calling policy objects directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.config.scenario import PolicyConfig
from blis_simpy.core.request import Request, RequestView
from blis_simpy.core.snapshot import InstanceSnapshot, Role
from blis_simpy.policies.admission import ADMISSION
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.routing import ROUTING
from blis_simpy.policies.scheduler import SCHEDULER


def view(rid: str = "request_0", arrival_us: int = 0, input_tokens: int = 10,
         tenant: str = "", slo: str = "", hashes: Sequence[int] = ()) -> RequestView:
    return RequestView(rid, arrival_us, input_tokens, tenant, slo, tuple(hashes))


def snap(index: int, queue: int = 0, batch: int = 0, pending: int = 0, kv: float = 0.0,
         in_flight: int | None = None) -> InstanceSnapshot:
    return InstanceSnapshot(
        id=f"instance_{index}", role=Role.MONOLITHIC, timestamp=0, queue_depth=queue,
        batch_size=batch, kv_utilization=kv, free_kv_blocks=100, pending_requests=pending,
        in_flight_requests=pending if in_flight is None else in_flight, cache_hit_rate=0.0,
        recent_ttft_ms=0.0, recent_tpot_ms=0.0, estimated_wait_ms=0.0,
    )


def loads(*values: int) -> list[InstanceSnapshot]:
    """Snapshots whose effective load is `values` (all of it in the wait queue)."""
    return [snap(i, queue=v) for i, v in enumerate(values)]


def request(index: int, arrival: int = 0, input_len: int = 10, priority: float = 0.0
            ) -> Request:
    req = Request(index, arrival, np.arange(input_len, dtype=np.int64) + 1000 * index,
                  np.arange(3, dtype=np.int64))
    req.priority = priority
    req.observe(16)
    return req


def admission(name: str, **params: Any):
    return ADMISSION.create(PolicyConfig(name, params), "policies.admission")


def priority(name: str, **params: Any):
    return PRIORITY.create(PolicyConfig(name, params), "policies.priority")


def routing(name: str, **params: Any):
    return ROUTING.create(PolicyConfig(name, params), "policies.routing")


def scheduler(name: str, **params: Any):
    return SCHEDULER.create(PolicyConfig(name, params), "policies.scheduler")
