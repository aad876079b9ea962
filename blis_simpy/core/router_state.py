"""The gateway's own bookkeeping, which admission, priority and routing policies may read.

Per tenant: requests seen, requests active (admitted, not yet finished or rejected), the
recent arrival rate and whether the tenant is bursting; globally: in-flight requests, the
recent request rate and throughput, whether arrivals as a whole are bursting, a bounded history
of load samples (seed 001 §3's `HistoricalMetrics`), the ids of the routable instances (fleet
order) and the shadow KV model (`core/shadow_kv.py`). Accessors return ordered sequences,
never a dict's iteration order (determinism, seed L.2).

A burst (seed 001 §3, `BurstDetected`) is an arrival rate over the last second at least
`BURST_FACTOR` times the mean rate before that second, with at least `BURST_MIN` arrivals in
it; before a whole second has passed since the first arrival there is no "before" and no burst.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.core.units import US_PER_S

RATE_WINDOW_US = US_PER_S  # recent rates are counted over the last second
BURST_FACTOR = 2.0  # a burst: the last second's rate at least this times the rate before it
BURST_MIN = 4  # ... with at least this many arrivals in the last second
HISTORY_INTERVAL_US = US_PER_S  # one load sample per second (taken at that second's first arrival)
HISTORY_SAMPLES = 60  # the history keeps the last minute's samples


class LoadSample(NamedTuple):
    """The router's load at one moment of the history (rates over the second before it)."""

    clock: int
    request_rate: float
    in_flight: int
    throughput: float


@dataclass(slots=True)
class TenantState:
    request_count: int = 0
    active_requests: int = 0
    rejected: int = 0
    recent: deque[int] | None = None  # arrival times within the rate window
    first_arrival: int = -1  # µs; -1 before the first

    def recent_rate(self, clock: int) -> float:
        """Arrivals per second over the last second."""
        return window_rate(self.recent, clock)

    def burst_detected(self, clock: int) -> bool:
        """Whether this tenant's arrivals over the last second are a burst (module doc)."""
        return is_burst(self.recent, self.request_count, self.first_arrival, clock)


def is_burst(recent: deque[int] | None, count: int, first: int, clock: int) -> bool:
    """The last second's arrivals (`recent`) against the `count` - len(recent) arrivals from
    `first` until a second ago."""
    if first < 0:
        return False
    window_rate(recent, clock)  # drop what is older than the window
    inside = len(recent) if recent else 0
    before_us = clock - RATE_WINDOW_US - first
    if inside < BURST_MIN or before_us <= 0:
        return False
    rate_before = (count - inside) * US_PER_S / before_us
    return inside * US_PER_S / RATE_WINDOW_US >= BURST_FACTOR * rate_before


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
        self.first_arrival = -1
        self.requests = 0  # arrivals so far
        self.completions: deque[int] = deque()  # completion times within the rate window
        self.completed = 0  # completions so far
        self.history: deque[LoadSample] = deque(maxlen=HISTORY_SAMPLES)
        self.next_sample = 0  # the clock from which the next arrival takes a load sample
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

    def throughput(self) -> float:
        """Completed requests per second over the last second."""
        return window_rate(self.completions, self.clock)

    def burst_detected(self) -> bool:
        """Whether arrivals as a whole over the last second are a burst (module doc)."""
        return is_burst(self.arrivals, self.requests, self.first_arrival, self.clock)

    def load_history(self) -> tuple[LoadSample, ...]:
        """The load samples of the last minute, oldest first: one per second that had an
        arrival, taken at its first arrival (before counting it)."""
        return tuple(self.history)

    # -- updates (gateway only) ---------------------------------------------------------------

    def on_arrival(self, tenant_id: str, clock: int) -> None:
        self.clock = clock
        if clock >= self.next_sample:
            self.history.append(LoadSample(clock, self.request_rate(), self.in_flight,
                                           self.throughput()))
            self.next_sample = clock + HISTORY_INTERVAL_US
            if self.first_arrival < 0:
                self.first_arrival = clock
        self.requests += 1
        state = self.tenant(tenant_id)
        if state.first_arrival < 0:
            state.first_arrival = clock
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

    def on_complete(self, clock: int) -> None:
        """A request completed (its last token left the instance) at `clock`."""
        self.completed += 1
        self.completions.append(clock)
        window_rate(self.completions, clock)
