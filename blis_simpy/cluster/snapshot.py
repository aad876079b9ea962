"""What the router sees of the instances: snapshots taken when a policy reads them (BC-5, NC-2),
from a provider that re-reads each field when its observability rule says so (BC-6, BC-7).

Fields with a rule (queue depth, batch size, KV utilization, cache hit rate, recent TTFT and
TPOT) are immediate, periodic or on demand; on-demand fields change only when a policy calls
`Snapshots.refresh()`. Free KV blocks, in-flight and pending counts and the estimated wait are
always read fresh (seed G.2).

Every field is read when the snapshot is taken, not when a policy first reads the field: a
snapshot is a value a policy or the decision trace may keep (later changes to the instance
must not reach it), and a periodic field's refresh times are the times snapshots are taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence

from blis_simpy.cluster.cache_signal import CacheSignal
from blis_simpy.config.scenario import ObservabilityConfig, Refresh
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.engine.instance import Instance

# field -> how to read its live value from an instance
FIELDS: dict[str, Callable[[Instance], float]] = {
    "queue_depth": lambda inst: inst.queue_depth,
    "batch_size": lambda inst: len(inst.running),
    "kv_utilization": lambda inst: inst.kv.used / inst.kv.total,
    "cache_hit_rate": lambda inst: inst.kv.hits / (inst.kv.hits + inst.kv.misses)
    if inst.kv.hits + inst.kv.misses else 0.0,
    "recent_ttft": lambda inst: inst.recent_ttft_ms(),
    "recent_tpot": lambda inst: inst.recent_tpot_ms(),
}


class SnapshotProvider:
    """Per-instance cached field values, refreshed per field by mode: immediate (every read),
    periodic (when the interval has passed since the last refresh; the first read always
    refreshes) or on demand (only through `refresh_all`). Keyed by instance id.

    The rules are sorted by mode once, here: a snapshot re-reads its immediate fields and
    checks only its periodic ones, never looking at the on-demand ones."""

    def __init__(self, config: ObservabilityConfig, pending: Mapping[str, int],
                 in_flight: Mapping[str, int]) -> None:
        rules: list[tuple[str, Refresh]] = [(f, getattr(config, f)) for f in FIELDS]
        self.immediate: list[tuple[str, Callable[[Instance], float]]] = [
            (f, FIELDS[f]) for f, rule in rules if rule.mode == "immediate"]
        self.periodic: list[tuple[str, Callable[[Instance], float], int]] = [
            (f, FIELDS[f], rule.interval_us) for f, rule in rules if rule.mode == "periodic"]
        self.pending = pending
        self.in_flight = in_flight
        self.values: dict[str, dict[str, float]] = {}
        self.last: dict[str, dict[str, float]] = {}
        self.cache_signal: CacheSignal | None = None  # refreshed with the fields

    def snapshot(self, instance: Instance, clock: int) -> InstanceSnapshot:
        values = self.values.get(instance.id)
        if values is None:  # first sight of this instance: every field is read
            values = self.values[instance.id] = {f: read(instance) for f, read in
                                                 FIELDS.items()}
            self.last[instance.id] = dict.fromkeys(FIELDS, -math.inf)
        for name, read in self.immediate:
            values[name] = read(instance)
        last = self.last[instance.id]
        for name, read, interval in self.periodic:
            if clock - last[name] >= interval:
                values[name] = read(instance)
                last[name] = clock
        kv = instance.kv
        # Positional, in the dataclass's field order: matching 14 keywords costs more than
        # the reads themselves (InstanceSnapshot is one of the few allocations per decision).
        return InstanceSnapshot(
            instance.id, instance.role, clock,  # id, role, timestamp
            int(values["queue_depth"]), int(values["batch_size"]),
            values["kv_utilization"], kv.free_blocks,
            self.pending.get(instance.id, 0), self.in_flight.get(instance.id, 0),
            values["cache_hit_rate"], values["recent_ttft"], values["recent_tpot"],
            instance.estimated_wait_ms(), kv.cpu_utilization(),
        )

    def refresh_all(self, instances: Sequence[Instance], clock: int) -> None:
        """Re-read every field of every instance (what an on-demand field waits for)."""
        for instance in instances:
            self.values[instance.id] = {f: read(instance) for f, read in FIELDS.items()}
            self.last[instance.id] = dict.fromkeys(FIELDS, clock)
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
