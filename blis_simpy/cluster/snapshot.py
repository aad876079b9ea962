"""What the router sees of an instance: immutable snapshots with a timestamp (BC-5, NC-2), and
a provider that re-reads each field when its observability rule says so (BC-6, BC-7)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from blis_simpy.config.scenario import ObservabilityConfig, Refresh
from blis_simpy.engine.instance import Instance

EMPTY: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class InstanceSnapshot:
    """One instance as observed at `timestamp` (µs). A value: later changes never reach it."""

    id: str
    index: int
    timestamp: int
    queue_depth: int
    batch_size: int
    kv_utilization: float
    free_kv_blocks: int
    pending_requests: int  # routed here, not yet in its wait queue
    in_flight_requests: int  # routed here, not yet finished
    cache_hit_rate: float
    recent_ttft_ms: float
    recent_tpot_ms: float
    estimated_wait_ms: float
    extended: Mapping[str, float] = field(default_factory=lambda: EMPTY)

    @property
    def effective_load(self) -> int:
        """Queue + batch + routed-but-not-queued: the reference's load signal."""
        return self.queue_depth + self.batch_size + self.pending_requests


FIELDS = ("queue_depth", "batch_size", "kv_utilization", "cache_hit_rate", "recent_ttft",
          "recent_tpot")


def read(instance: Instance, name: str) -> tuple[float, ...]:
    """The live value(s) behind one observability field."""
    if name == "queue_depth":
        return (len(instance.wait_queue), instance.estimated_wait_ms())
    if name == "batch_size":
        return (len(instance.running),)
    if name == "kv_utilization":
        return (instance.kv.utilization, instance.kv.free_blocks)
    if name == "cache_hit_rate":
        return (instance.kv.hit_rate,)
    if name == "recent_ttft":
        return (instance.recent_ttft_ms(),)
    return (instance.recent_tpot_ms(),)


class SnapshotProvider:
    """Per-instance cached field values, refreshed per field by mode: immediate (every read),
    periodic (when the interval has passed since the last refresh; the first read always
    refreshes) or on-demand (only through `refresh_all`)."""

    def __init__(self, instances: Sequence[Instance], config: ObservabilityConfig,
                 pending: list[int], in_flight: list[int]) -> None:
        self.instances = instances
        self.rules: list[tuple[str, Refresh]] = [(f, getattr(config, f)) for f in FIELDS]
        self.pending = pending
        self.in_flight = in_flight
        self.values = [{f: read(inst, f) for f in FIELDS} for inst in instances]
        self.last = [dict.fromkeys(FIELDS, -math.inf) for _ in instances]

    def snapshot(self, index: int, clock: int) -> InstanceSnapshot:
        values, last = self.values[index], self.last[index]
        instance = self.instances[index]
        for name, rule in self.rules:
            if rule.mode == "immediate" or (
                    rule.mode == "periodic" and clock - last[name] >= rule.interval_us):
                values[name] = read(instance, name)
                last[name] = clock
        return self._build(index, clock)

    def refresh_all(self, clock: int) -> None:
        for index, instance in enumerate(self.instances):
            for name in FIELDS:
                self.values[index][name] = read(instance, name)
                self.last[index][name] = clock

    def _build(self, index: int, clock: int) -> InstanceSnapshot:
        v = self.values[index]
        queue_depth, wait = v["queue_depth"]
        utilization, free = v["kv_utilization"]
        return InstanceSnapshot(
            id=self.instances[index].name, index=index, timestamp=clock,
            queue_depth=int(queue_depth), batch_size=int(v["batch_size"][0]),
            kv_utilization=utilization, free_kv_blocks=int(free),
            pending_requests=self.pending[index], in_flight_requests=self.in_flight[index],
            cache_hit_rate=v["cache_hit_rate"][0], recent_ttft_ms=v["recent_ttft"][0],
            recent_tpot_ms=v["recent_tpot"][0], estimated_wait_ms=wait,
        )


class Snapshots(Sequence[InstanceSnapshot]):
    """All instances' snapshots for one decision, taken only when a policy reads them, so a
    policy that never looks (round-robin) costs nothing."""

    def __init__(self, provider: SnapshotProvider, clock: int) -> None:
        self.provider = provider
        self.clock = clock
        self.taken: dict[int, InstanceSnapshot] = {}

    def __len__(self) -> int:
        return len(self.provider.instances)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        snap = self.taken.get(index)
        if snap is None:
            if not 0 <= index < len(self):
                raise IndexError(index)
            snap = self.taken[index] = self.provider.snapshot(index, self.clock)
        return snap

    def __iter__(self) -> Iterator[InstanceSnapshot]:
        return (self[i] for i in range(len(self)))
