"""What a router that reads the instances' real prefix caches is told of them (llm-d's KV-event
indexer; the reference's `--cache-signal-delay`).

Immediate: every question reads the instance's cache as it is now (an oracle). Periodic: the
router holds a copy of each instance's cached block hashes, taken when first asked and again
once the interval has passed, so a prefix cached or evicted since is seen late, as KV events
reach a real router. On demand: the copy is taken again only when a policy refreshes its
snapshots. Only the scorers that read real caches ask (`policies/scorers.py`), so a run without
them never copies anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.config.scenario import Refresh


class CacheSignal:
    """Per instance id: the cache as last reported (copied block hashes and when)."""

    def __init__(self, fleet: Fleet, rule: Refresh) -> None:
        self.fleet = fleet
        self.mode = rule.mode
        self.interval = rule.interval_us
        self.copies: dict[str, tuple[int, set[int]]] = {}

    def cached_blocks(self, instance_id: str, hashes: Sequence[int], clock: int) -> int:
        instance = self.fleet.get(instance_id)
        if instance is None:
            return 0
        if self.mode == "immediate":
            return instance.kv.cached_prefix(hashes)
        copy = self.copies.get(instance_id)
        if copy is None or (self.mode == "periodic" and clock - copy[0] >= self.interval):
            copy = self.copies[instance_id] = (clock, instance.kv.cached_hashes())
        cached = copy[1]
        count = 0
        for h in hashes:
            if h not in cached:
                break
            count += 1
        return count

    def refresh(self) -> None:
        """A policy asked for fresh data: every copy is taken again at its next read."""
        self.copies.clear()
