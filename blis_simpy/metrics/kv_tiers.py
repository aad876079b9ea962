"""What the KV tiers below the GPU did (engine.kv_tiers), from the instances' tier records.

Every block a prefix lookup asks for is counted once, where it was found: on the GPU (a hit),
on the CPU or storage tier (a hit there, reloaded), or nowhere (a miss, computed). The overall
hit rate (`kv_tiers.hit_rate`) is every hit over every block lookup; the summary's
`cache_hit_rate` counts prompt tokens instead (cached over prompt tokens, each request once,
when first scheduled; a cached token may come from any tier). Thrashing: reloads of blocks
the GPU evicted less than `thrash_window_s` before, as a share of the hashed blocks the GPU
evicted (`thrashing_rate`), and as `kv_thrashing` anomalies when `thrash_anomaly_count` of
them fall within the window on one instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.core.records import InstanceRecord
from blis_simpy.core.tier_records import TierRecord
from blis_simpy.core.units import US_PER_MS


def tiered(instances: Sequence[InstanceRecord]) -> list[tuple[InstanceRecord, TierRecord]]:
    return [(i, i.tiers) for i in instances if i.tiers is not None]


def tier_summary(instances: Sequence[InstanceRecord]) -> dict[str, Any] | None:
    """Hit rates per tier, transfers and thrashing over these instances; None without tiers."""
    pairs = tiered(instances)
    if not pairs:
        return None
    gpu = sum(i.kv_hits for i, _ in pairs)
    cpu = sum(t.cpu_hits for _, t in pairs)
    storage = sum(t.storage_hits for _, t in pairs)
    misses = sum(i.kv_misses for i, _ in pairs)
    lookups = gpu + cpu + storage + misses
    evictions = sum(t.evictions for _, t in pairs)
    thrashes = sum(len(t.thrashes) for _, t in pairs)
    offloads = sum(t.offloads for _, t in pairs)
    reloads = sum(t.reloads for _, t in pairs)

    def rate(n: int, of: int) -> float:
        return n / of if of else 0.0

    return {
        "gpu_hit_rate": rate(gpu, lookups),
        "cpu_hit_rate": rate(cpu, lookups),
        "storage_hit_rate": rate(storage, lookups),
        "hit_rate": rate(gpu + cpu + storage, lookups),
        "offloaded_blocks": offloads,
        "offloaded_bytes": sum(t.offloads * t.block_bytes for _, t in pairs),
        "reloaded_blocks": reloads,
        "reloaded_bytes": sum(t.reloads * t.block_bytes for _, t in pairs),
        "offload_link_ms": sum(t.offload_us for _, t in pairs) / US_PER_MS,
        "reload_wait_ms": sum(t.reload_us for _, t in pairs) / US_PER_MS,
        "gpu_evictions": evictions,
        "thrashes": thrashes,
        "thrashing_rate": rate(thrashes, evictions),
    }


def tier_levels(inst: InstanceRecord) -> tuple[np.ndarray, np.ndarray]:
    """CPU and storage use (0..1) at each of the instance's step starts (0 without tiers)."""
    tiers = inst.tiers
    if tiers is None:
        zeros = np.zeros(len(inst.start))
        return zeros, zeros
    levels = np.array(tiers.levels, dtype=np.int64).reshape(-1, 3)
    at = np.searchsorted(levels[:, 0], inst.start, side="right") - 1
    cpu = levels[at, 1] / (tiers.cpu_total or 1)
    storage = levels[at, 2] / (tiers.storage_total or 1)
    return cpu, storage

