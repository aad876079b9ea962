"""The gateway's own bookkeeping, which admission, priority and routing policies may read.

Per tenant: requests seen, requests active (admitted, not yet finished or rejected) and the
recent arrival rate; globally: in-flight requests, the recent request rate, the ids of the
routable instances (fleet order) and the shadow KV model (`core/shadow_kv.py`). Accessors
return ordered sequences, never a dict's iteration order (determinism, seed L.2).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.core.units import US_PER_S

RATE_WINDOW_US = US_PER_S  # recent rates are counted over the last second


@dataclass(slots=True)
class TenantState:
    request_count: int = 0
    active_requests: int = 0
    rejected: int = 0
    recent: deque[int] | None = None  # arrival times within the rate window

    def recent_rate(self, clock: int) -> float:
        """Arrivals per second over the last second."""
        return window_rate(self.recent, clock)


def window_rate(times: deque[int] | None, clock: int) -> float:
    if not times:
        return 0.0
    while times and times[0] <= clock - RATE_WINDOW_US:
        times.popleft()
    return len(times) * US_PER_S / RATE_WINDOW_US


class CacheSignal(Protocol):
    """The instances' real prefix caches as the router is told of them (KV events)."""

    def cached_blocks(self, instance_id: str, hashes: Sequence[int], clock: int) -> int:
        """How many of these chained block hashes, from the first on, the instance has
        cached, as last reported."""
        ...


class AdapterSignal(Protocol):
    """Which LoRA adapters the instances hold in their slots (engine.lora)."""

    def holds_adapter(self, instance_id: str, adapter: str) -> bool: ...


class FleetView(Protocol):
    """The routable instances as an admission policy may see them (snapshots taken when
    read, by the same freshness rules as routing's)."""

    def admission_snapshots(self, clock: int) -> Sequence[InstanceSnapshot]: ...


class RouterState:
    """Tenant and global counters, updated by the gateway as requests move through it."""

    def __init__(self) -> None:
        self.tenants: dict[str, TenantState] = {}
        self.in_flight = 0
        self.arrivals: deque[int] = deque()
        self.clock = 0
        self.instances: tuple[str, ...] = ()  # routable instance ids, in fleet order
        # the router's predicted prefix placement; kept when the routing policy reads it or
        # decisions are traced (None otherwise)
        self.shadow_kv: ShadowKV | None = None
        self.cache_signal: CacheSignal | None = None  # set by the gateway
        self.fleet_view: FleetView | None = None  # set by the gateway
        self.adapter_signal: AdapterSignal | None = None  # set by the gateway

    def instance_snapshots(self) -> Sequence[InstanceSnapshot]:
        """The snapshots of the instances the request being decided on could go to (its
        model's routable instances), for admission policies that judge the fleet's load;
        empty with no fleet (a policy called outside a run)."""
        view = self.fleet_view
        return () if view is None else view.admission_snapshots(self.clock)

    def cached_blocks(self, instance_id: str, hashes: Sequence[int]) -> int:
        """The prompt's leading blocks the instance has cached, as the router last heard
        (`cluster.observability.cached_blocks`); 0 with no cache signal (a policy called
        outside a run)."""
        signal = self.cache_signal
        if signal is None or not hashes:
            return 0
        return signal.cached_blocks(instance_id, hashes, self.clock)

    def holds_adapter(self, instance_id: str, adapter: str) -> bool:
        """Whether the instance has the LoRA adapter resident now (read when asked, as the
        reference head's default immediate snapshot does); False with no signal (a policy
        called outside a run)."""
        signal = self.adapter_signal
        return signal is not None and signal.holds_adapter(instance_id, adapter)

    def instance_ids(self) -> tuple[str, ...]:
        """The routable instances' ids, in fleet order (routing ties go to the first)."""
        return self.instances

    def tenant(self, tenant_id: str) -> TenantState:
        state = self.tenants.get(tenant_id)
        if state is None:
            state = self.tenants[tenant_id] = TenantState(recent=deque())
        return state

    def tenant_ids(self) -> list[str]:
        return sorted(self.tenants)

    def request_rate(self) -> float:
        """Arrivals per second over the last second."""
        return window_rate(self.arrivals, self.clock)

    # -- updates (gateway only) ---------------------------------------------------------------

    def on_arrival(self, tenant_id: str, clock: int) -> None:
        self.clock = clock
        state = self.tenant(tenant_id)
        state.request_count += 1
        assert state.recent is not None
        state.recent.append(clock)
        self.arrivals.append(clock)
        # keep the windows short even if no policy ever asks for a rate
        window_rate(state.recent, clock)
        window_rate(self.arrivals, clock)

    def on_admit(self, tenant_id: str) -> None:
        self.tenant(tenant_id).active_requests += 1
        self.in_flight += 1

    def on_reject(self, tenant_id: str) -> None:
        self.tenant(tenant_id).rejected += 1

    def on_finish(self, tenant_id: str) -> None:
        self.tenant(tenant_id).active_requests -= 1
        self.in_flight -= 1
