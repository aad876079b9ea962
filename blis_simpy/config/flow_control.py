"""Gateway flow control (`cluster.flow_control`): a queue at the gateway between admission and
routing, in priority bands, drained by a dispatch process while the fleet is not saturated
(llm-d's flow control, the reference's `--flow-control`; cluster/flow.py).

A request's band is its SLO class's priority (GAIE's convention: critical 4, standard 3 and
unnamed classes 3, batch -1, sheddable -2, background -3; a negative priority is sheddable).
The priority table is shared with the `tier-shed` and `gaie-legacy` admission templates.
Leaving the section out (the default) is no queue at all: the run is the run without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_FLOAT

# GAIE's SLO class priorities (sim/slo_priority.go in the reference's head); any other class,
# the unnamed one included, has DEFAULT_PRIORITY.
SLO_PRIORITIES = {"critical": 4, "standard": 3, "batch": -1, "sheddable": -2, "background": -3}
DEFAULT_PRIORITY = 3
PRIORITY_BOUND = 100  # |priority| at most this (the reference's bound)
MAX_QUEUE = 10**9


def check_priorities(priorities: dict[str, int], path: str) -> None:
    for cls, value in priorities.items():
        if isinstance(value, bool) or not isinstance(value, int) \
                or not -PRIORITY_BOUND <= value <= PRIORITY_BOUND:
            raise ScenarioError(join(path, cls), f"got {value!r}",
                                f"a whole number in [-{PRIORITY_BOUND}, {PRIORITY_BOUND}]")


class Priorities:
    """SLO class -> band priority: GAIE's table with a scenario's overrides."""

    def __init__(self, overrides: dict[str, int] | None = None,
                 default: int = DEFAULT_PRIORITY) -> None:
        self.table = {**SLO_PRIORITIES, **(overrides or {})}
        self.default = default

    def of(self, slo_class: str) -> int:
        return self.table.get(slo_class, self.default)

    def sheddable(self, slo_class: str) -> bool:
        return self.of(slo_class) < 0

    def bands(self) -> list[int]:
        """Every band priority a request can have, highest first."""
        return sorted({*self.table.values(), self.default}, reverse=True)


@dataclass(frozen=True, slots=True)
class UtilizationSaturation:
    """GAIE's utilization detector: the mean over routable instances of max(queue depth /
    queue_depth, KV utilisation / kv_utilization); 1 or more is saturated."""

    type: Literal["utilization"] = spec("utilization", help="queue depth and KV use per instance")
    queue_depth: float = spec(5.0, help="waiting requests per instance that count as full",
                              gt=0, le=MAX_FLOAT)
    kv_utilization: float = spec(0.8, help="KV blocks used / total that count as full", gt=0,
                                 le=1)


@dataclass(frozen=True, slots=True)
class ConcurrencySaturation:
    """Requests in flight over max_in_flight per routable instance; 1 or more is saturated."""

    type: Literal["concurrency"] = spec(help="requests in flight per instance")
    max_in_flight: int = spec(100, help="requests in flight per instance that count as full",
                              ge=1, le=MAX_QUEUE)


@dataclass(frozen=True, slots=True)
class NeverSaturated:
    """Never saturated: every queued request is dispatched at once (the queue only bounds
    bursts that arrive at one instant, and orders them)."""

    type: Literal["never"] = spec(help="dispatch at once")


Saturation = UtilizationSaturation | ConcurrencySaturation | NeverSaturated


@dataclass(frozen=True, slots=True)
class FlowControlConfig:
    saturation: Saturation = spec(
        factory=UtilizationSaturation, help="when the fleet is too busy to take another "
        "request: utilization (GAIE's default), concurrency or never")
    max_queue_depth: int = spec(0, help="requests the whole queue holds; 0 = unlimited", ge=0,
                                le=MAX_QUEUE)
    band_capacity: int = spec(0, help="requests each band holds; 0 = unlimited", ge=0,
                              le=MAX_QUEUE)
    band_capacities: dict[str, int] = spec(
        factory=dict, help="SLO class -> requests its band holds (overrides band_capacity for "
        "that band; 0 = unlimited)")
    priorities: dict[str, int] = spec(
        factory=dict, help="SLO class -> band priority, over GAIE's (critical 4, standard 3, "
        "batch -1, sheddable -2, background -3); negative = sheddable")
    default_priority: int = spec(DEFAULT_PRIORITY, help="band of any other SLO class",
                                 ge=-PRIORITY_BOUND, le=PRIORITY_BOUND)
    on_full: Literal["reject", "shed-lowest"] = spec(
        "reject", help="a full queue: reject the newcomer (llm-d), or shed the newest request "
        "of the lowest sheddable band below the newcomer's to make room")
    dispatch_order: Literal["priority", "fifo", "slo-deadline"] = spec(
        "priority", help="priority: highest band first; fifo: earliest arrival among the bands "
        "dispatch is open to; slo-deadline: highest band first, in a flow the earliest TTFT "
        "deadline (queued time + the request's TTFT target)")
    fairness: Literal["global-strict", "round-robin"] = spec(
        "global-strict", help="which tenant's flow a band serves next: global-strict (earliest "
        "arrival) or round-robin (tenants in turn, by name)")
    usage_limit: float = spec(
        1.0, help="saturation at which the lowest band stops being dispatched; the highest "
        "stops at 1, bands between in proportion (1: every band up to saturation 1)", gt=0,
        le=1)
    dispatch_tick_s: float = spec(0.001, help="how often a queue held back by saturation "
                                  "tries again (s; llm-d's 1 ms)", gt=0, le=60)
    queue_ttl_s: float | None = spec(None, help="a request queued this long is dropped "
                                     "(reject_code gateway_queue_ttl); null = never", gt=0,
                                     le=1e6)

    def validate(self, path: str) -> None:
        check_priorities(self.priorities, join(path, "priorities"))
        table = Priorities(self.priorities, self.default_priority)
        per_band: dict[int, tuple[str, int]] = {}
        for cls, capacity in self.band_capacities.items():
            where = join(join(path, "band_capacities"), cls)
            if isinstance(capacity, bool) or not isinstance(capacity, int) \
                    or not 0 <= capacity <= MAX_QUEUE:
                raise ScenarioError(where, f"got {capacity!r}", f"a whole number in [0, "
                                    f"{MAX_QUEUE}]")
            band = table.of(cls)
            other = per_band.setdefault(band, (cls, capacity))
            if other[1] != capacity:
                raise ScenarioError(where, f"{cls!r} shares band {band} with {other[0]!r}, "
                                    f"given {other[1]}", "one capacity per band")

    def band_limit(self, band: int) -> int:
        """Requests band `band` holds (0: unlimited)."""
        table = Priorities(self.priorities, self.default_priority)
        for cls, capacity in self.band_capacities.items():
            if table.of(cls) == band:
                return capacity
        return self.band_capacity
