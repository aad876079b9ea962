"""The router's shadow KV model (design §3, "KV state: observed vs shadow"): where the router
*predicts* each prompt block is cached, built only from what the router itself sees.

The router never reads an instance's cache. It knows where it sent each prompt, so it assumes
the blocks of a routed prompt are cached on the chosen instance, and it estimates eviction with
one LRU set of block hashes per instance (`capacity` hashes; the oldest touched goes first).
No instance reports evictions or transfers yet; when KV tiers and P/D transfers do, they drop
or move blocks here. The observed state is in the snapshots (`kv_utilization`, `free_kv_blocks`,
`cache_hit_rate`); comparing the two after a run gives the `shadow_divergence` anomalies and
the shadow accuracy (`metrics/trace/shadow.py`).

The gateway updates the model after every routing decision, whatever the policy (invariant
`router_shadow_update`); policies read it through `RouterState.shadow_kv`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

DEFAULT_CAPACITY = 10_000  # block hashes per instance (the reference's router index)


class ShadowKV:
    """Per instance id, an LRU set of the prompt block hashes routed there."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"shadow KV capacity must be >= 1 block, got {capacity}")
        self.capacity = capacity
        self.sets: dict[str, OrderedDict[int, None]] = {}

    def expected_hit(self, instance: str, hashes: Sequence[int]) -> int:
        """How many leading blocks of a prompt the router expects `instance` to have cached."""
        seen = self.sets.get(instance)
        if seen is None:
            return 0
        count = 0
        for h in hashes:
            if h not in seen:
                break
            count += 1
        return count

    def routed(self, instance: str, hashes: Sequence[int]) -> None:
        """A prompt was sent to `instance`: its blocks become the most recently used there,
        the least recently used beyond the capacity are predicted evicted."""
        seen = self.sets.get(instance)
        if seen is None:
            seen = self.sets[instance] = OrderedDict()
        capacity = self.capacity
        touch, add, evict = seen.move_to_end, seen.__setitem__, seen.popitem  # bound once
        for h in hashes:
            if h in seen:
                touch(h)
            else:
                add(h, None)
                if len(seen) > capacity:
                    evict(False)
