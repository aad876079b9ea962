"""What the router sees of the instances: snapshots taken when a policy reads them (BC-5, NC-2),
from a provider that re-reads each field when its observability rule says so (BC-6, BC-7).

Fields with a rule (queue depth, batch size, KV utilization, cache hit rate, recent TTFT and
TPOT) are immediate, periodic or on demand; on-demand fields change only when a policy calls
`Snapshots.refresh()`. Free KV blocks, in-flight and pending counts and the estimated wait are
always read fresh (seed G.2).

The cache hit rate is recent (`HitWindow`): hits over lookups in the last second, counted from
the instance's running totals as the provider reads them, so the KV cache pays nothing for it.
Values without a named field go in the snapshot's `extended` mapping (`extended_of`).

Every field is read when the snapshot is taken, not when a policy first reads the field: a
snapshot is a value a policy or the decision trace may keep (later changes to the instance
must not reach it), and a periodic field's refresh times are the times snapshots are taken.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final, cast

from blis_simpy.cluster.cache_signal import CacheSignal
from blis_simpy.config.scenario import ObservabilityConfig, Refresh
from blis_simpy.core.snapshot import NO_EXTENDED, InstanceSnapshot
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.kv.tiered import TieredKVCache

HIT_RATE_WINDOW_US = US_PER_S  # `cache_hit_rate` counts the lookups of the last second
HIT_RATE_STEP_US = 10 * US_PER_MS  # ... from running totals kept at most this often

# The fields with a rule, in this order: a provider keeps each instance's values and refresh
# times as lists indexed by it, and reads a field's live value with `read_live`.
FIELDS = ("queue_depth", "batch_size", "kv_utilization", "cache_hit_rate", "recent_ttft",
          "recent_tpot")
# (Final: compiled, each is a constant, not a lookup in the module's globals.)
QUEUE_DEPTH: Final = 0
BATCH_SIZE: Final = 1
KV_UTILIZATION: Final = 2
CACHE_HIT_RATE: Final = 3
RECENT_TTFT: Final = 4
RECENT_TPOT: Final = 5


class HitWindow:
    """One instance's recent prefix-cache hit rate: hits over lookups since the newest kept
    reading of its running totals that is at least `HIT_RATE_WINDOW_US` old. Readings are kept
    at most every `HIT_RATE_STEP_US`, so the window is one second plus up to 10 ms (plus the
    time between reads, when reads are sparser). An instance observed for less than a window
    counts from its start (or from its last crash, which resets its totals)."""

    __slots__ = ("readings",)

    def __init__(self) -> None:
        self.readings: deque[tuple[int, int, int]] = deque()  # (clock, hits, lookups)

    def rate(self, hits: int, lookups: int, clock: int) -> float:
        readings = self.readings
        if readings:
            last = readings[-1]
            if hits < last[1] or lookups < last[2]:  # totals reset: start again
                readings.clear()
        if not readings or clock - readings[-1][0] >= HIT_RATE_STEP_US:
            readings.append((clock, hits, lookups))
        cut = clock - HIT_RATE_WINDOW_US
        while len(readings) > 1 and readings[1][0] <= cut:
            readings.popleft()
        base_hits = base_lookups = 0
        first = readings[0]
        if first[0] <= cut:
            base_hits, base_lookups = first[1], first[2]
        lookups -= base_lookups
        return (hits - base_hits) / lookups if lookups else 0.0


def extended_of(instance: Instance, clock: int) -> Mapping[str, float]:
    """The snapshot's `extended` values (seed G.2): the KV tiers' below the CPU utilization
    (a named field); nothing (a shared empty mapping) for an instance without tiers."""
    kv = instance.kv
    if not isinstance(kv, TieredKVCache):
        return NO_EXTENDED
    storage = kv.storage
    reload_free = kv.cpu_up.free_at if kv.storage_up is None else \
        max(kv.cpu_up.free_at, kv.storage_up.free_at)
    return MappingProxyType({
        "kv_storage_utilization": storage.used / storage.total if storage is not None else 0.0,
        "offload_backlog_ms": max(0, kv.cpu_down.free_at - clock) / US_PER_MS,
        "reload_backlog_ms": max(0, reload_free - clock) / US_PER_MS,
    })


class SnapshotProvider:
    """Per-instance cached field values, refreshed per field by mode: immediate (every read),
    periodic (when the interval has passed since the last refresh; the first read always
    refreshes) or on demand (only through `refresh_all`). Keyed by instance id.

    The rules are sorted by mode once, here: a snapshot re-reads its immediate fields and
    checks only its periodic ones, never looking at the on-demand ones. Fields are numbers
    (their place in FIELDS) read by one compiled method, not callables: a Python-level call
    per field cost more than the snapshot's other work (thousands of snapshots a run)."""

    def __init__(self, config: ObservabilityConfig, pending: Mapping[str, int],
                 in_flight: Mapping[str, int]) -> None:
        rules: list[Refresh] = [getattr(config, f) for f in FIELDS]
        self.immediate: list[int] = [i for i, rule in enumerate(rules)
                                     if rule.mode == "immediate"]
        self.periodic: list[tuple[int, int]] = [
            (i, rule.interval_us) for i, rule in enumerate(rules) if rule.mode == "periodic"]
        self.hit_windows: dict[str, HitWindow] = {}
        self.pending = pending
        self.in_flight = in_flight
        self.values: dict[str, list[float]] = {}  # instance id -> FIELDS' values
        self.last: dict[str, list[float]] = {}  # instance id -> FIELDS' refresh times
        self.cache_signal: CacheSignal | None = None  # refreshed with the fields

    def read_live(self, field: int, instance: Instance, clock: int) -> float:
        """The live value of FIELDS[field]."""
        if field == QUEUE_DEPTH:
            return float(instance.queue_depth)
        if field == BATCH_SIZE:
            return float(len(instance.running))
        if field == KV_UTILIZATION:
            return instance.kv.used / instance.kv.total
        if field == CACHE_HIT_RATE:
            return self._hit_rate(instance, clock)
        if field == RECENT_TTFT:
            return instance.recent_ttft_ms()
        return instance.recent_tpot_ms()

    def _hit_rate(self, instance: Instance, clock: int) -> float:
        window = self.hit_windows.get(instance.id)
        if window is None:
            window = self.hit_windows[instance.id] = HitWindow()
        kv = instance.kv
        return window.rate(kv.hits, kv.hits + kv.misses, clock)

    def read_all(self, instance: Instance, clock: int) -> list[float]:
        return [self.read_live(i, instance, clock) for i in range(len(FIELDS))]

    def snapshot(self, instance: Instance, clock: int) -> InstanceSnapshot:
        values = self.values.get(instance.id)
        if values is None:  # first sight of this instance: every field is read
            values = self.values[instance.id] = self.read_all(instance, clock)
            self.last[instance.id] = [-math.inf] * len(FIELDS)
        for i in self.immediate:
            values[i] = self.read_live(i, instance, clock)
        last = self.last[instance.id]
        for i, interval in self.periodic:
            if clock - last[i] >= interval:
                values[i] = self.read_live(i, instance, clock)
                last[i] = clock
        kv = instance.kv
        # The fields in the named tuple's order, made into one as its own `__new__` makes it
        # (`tuple.__new__`), without that interpreted `__new__`'s frame: InstanceSnapshot is
        # one of the few allocations per decision.
        return cast(InstanceSnapshot, tuple.__new__(InstanceSnapshot, (
            instance.id, instance.role, clock,  # id, role, timestamp
            int(values[QUEUE_DEPTH]), int(values[BATCH_SIZE]),
            values[KV_UTILIZATION], kv.free_blocks,
            self.pending.get(instance.id, 0), self.in_flight.get(instance.id, 0),
            values[CACHE_HIT_RATE], values[RECENT_TTFT], values[RECENT_TPOT],
            instance.estimated_wait_ms(), kv.cpu_utilization(), extended_of(instance, clock),
        )))

    def refresh_all(self, instances: Sequence[Instance], clock: int) -> None:
        """Re-read every field of every instance (what an on-demand field waits for)."""
        for instance in instances:
            self.values[instance.id] = self.read_all(instance, clock)
            self.last[instance.id] = [float(clock)] * len(FIELDS)
        if self.cache_signal is not None:
            self.cache_signal.refresh()


class Snapshots(Sequence[InstanceSnapshot]):
    """The routable instances' snapshots for one decision, in fleet order, each taken only
    when a policy reads it, so a policy that never looks costs nothing."""

    def __init__(self, provider: SnapshotProvider, instances: Sequence[Instance],
                 clock: int) -> None:
        self.provider = provider
        self.instances = instances
        self.clock = clock
        self.taken: dict[int, InstanceSnapshot] = {}

    def refresh(self) -> None:
        """Re-read every field now, on-demand ones included (a policy asking for fresh data)."""
        self.provider.refresh_all(self.instances, self.clock)
        self.taken.clear()

    def __len__(self) -> int:
        return len(self.instances)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        snap = self.taken.get(index)
        if snap is None:
            if not 0 <= index < len(self):
                raise IndexError(index)
            snap = self.taken[index] = self.provider.snapshot(self.instances[index],
                                                              self.clock)
        return snap

    def __iter__(self) -> Iterator[InstanceSnapshot]:
        # A generator function, not a generator expression (which mypyc would make a list,
        # taking every snapshot when a policy starts iterating).
        for i in range(len(self)):
            yield self[i]
