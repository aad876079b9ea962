"""The parts of a KV tier below the GPU: the link blocks move over, and the tier itself (a set
of content hashes with a capacity and an eviction policy).

A link serves one transfer at a time, first come first served: a transfer starts when the link
is free and takes the link's base latency plus its blocks over the link's rate. That is what a
SimPy Resource of capacity 1 would give for transfers of known length, kept as the time the
link next falls free, so it costs nothing per event and cannot deadlock: every transfer ends a
bounded time after it was asked for (the work queued before it, plus its own).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from typing import Protocol


class Link:
    """A transfer link: base latency plus blocks over blocks per second, transfers queued."""

    __slots__ = ("base_us", "blocks_per_s", "free_at")

    def __init__(self, base_us: int, blocks_per_s: float) -> None:
        self.base_us = base_us
        self.blocks_per_s = blocks_per_s
        self.free_at = 0  # when the transfers queued so far are done

    def duration(self, blocks: int) -> int:
        """Microseconds `blocks` blocks take once the link is theirs (whole µs, rounded up)."""
        return self.base_us + math.ceil(blocks * 1_000_000 / self.blocks_per_s - 1e-9)

    def transfer(self, now: int, blocks: int) -> int:
        """Queue a transfer asked for at `now`; returns when it ends."""
        end = max(now, self.free_at) + self.duration(blocks)
        self.free_at = end
        return end

    def send(self, now: int, blocks: int) -> int:
        """Queue a transfer nobody waits for; returns the link time it takes."""
        took = self.duration(blocks)
        self.free_at = max(now, self.free_at) + took
        return took


class EvictionPolicy(Protocol):
    """Which hash a full tier drops. LRU and FIFO keep it as the order of the tier's entries
    (oldest first); others keep what they need beside it."""

    def touch(self, entries: OrderedDict[int, None], block_hash: int,
              priority: float | None = None) -> None:
        """A stored block was used again (reloaded, or stored again), by a request of
        `priority` (None: unknown)."""
        ...

    def stored(self, block_hash: int, priority: float = 0.0) -> None:
        """A block was stored (it is the newest entry); `priority`: its last user's."""
        ...

    def priority(self, block_hash: int) -> float:
        """The priority a stored block carries (what it takes down to the next tier)."""
        ...

    def removed(self, block_hash: int) -> None:
        """A block left the tier (dropped, or moved back up)."""
        ...

    def victim(self, entries: OrderedDict[int, None]) -> int:
        """The hash to drop from a full tier."""
        ...

    def clear(self) -> None:
        ...

    def tracks(self, entries: OrderedDict[int, None]) -> bool:
        """Whether what it keeps beside the entries is exactly about them (the checks)."""
        ...


class LRU:
    """Least recently stored or reloaded first (vLLM's CPU offloading manager)."""

    def touch(self, entries: OrderedDict[int, None], block_hash: int,
              priority: float | None = None) -> None:
        entries.move_to_end(block_hash)

    def stored(self, block_hash: int, priority: float = 0.0) -> None:
        return None

    def priority(self, block_hash: int) -> float:
        return 0.0

    def removed(self, block_hash: int) -> None:
        return None

    def victim(self, entries: OrderedDict[int, None]) -> int:
        return next(iter(entries))

    def clear(self) -> None:
        return None

    def tracks(self, entries: OrderedDict[int, None]) -> bool:
        return True


class FIFO(LRU):
    """First stored first, whatever happened since."""

    def touch(self, entries: OrderedDict[int, None], block_hash: int,
              priority: float | None = None) -> None:
        return None


class LFU(LRU):
    """Least frequently used first (seed 001 §6 EvictionPolicy "lfu"): the block stored or
    reloaded the fewest times since it entered the tier; among equals the least recently used.
    Blocks sit in one LRU-ordered bucket per use count, so a drop costs O(1)."""

    def __init__(self) -> None:
        self.uses: dict[int, int] = {}
        self.buckets: dict[int, OrderedDict[int, None]] = {}
        self.least = 1  # no bucket below it holds a block

    def _put(self, block_hash: int, uses: int) -> None:
        self.uses[block_hash] = uses
        self.buckets.setdefault(uses, OrderedDict())[block_hash] = None

    def _take(self, block_hash: int) -> int:
        uses = self.uses.pop(block_hash)
        bucket = self.buckets[uses]
        del bucket[block_hash]
        if not bucket:
            del self.buckets[uses]
        return uses

    def touch(self, entries: OrderedDict[int, None], block_hash: int,
              priority: float | None = None) -> None:
        entries.move_to_end(block_hash)
        self._put(block_hash, self._take(block_hash) + 1)

    def stored(self, block_hash: int, priority: float = 0.0) -> None:
        self._put(block_hash, 1)
        self.least = 1

    def removed(self, block_hash: int) -> None:
        self._take(block_hash)

    def victim(self, entries: OrderedDict[int, None]) -> int:
        while self.least not in self.buckets:
            self.least += 1
        return next(iter(self.buckets[self.least]))

    def clear(self) -> None:
        self.uses.clear()
        self.buckets.clear()
        self.least = 1

    def tracks(self, entries: OrderedDict[int, None]) -> bool:
        return (self.uses.keys() == entries.keys()
                and sum(len(b) for b in self.buckets.values()) == len(entries)
                and all(self.least <= uses for uses in self.uses.values()))


class PriorityAware(LRU):
    """Lowest priority first (seed 001 §6 EvictionPolicy "priority"): a block carries the
    priority of its last user (the request that released it on the GPU, or that reloaded it),
    higher = more urgent as everywhere; among equals the least recently used. A heap of
    (priority, recency) with stale entries skipped, so a drop costs O(log n)."""

    def __init__(self) -> None:
        self.key: dict[int, tuple[float, int]] = {}
        self.heap: list[tuple[float, int, int]] = []
        self.seq = 0

    def _put(self, block_hash: int, priority: float) -> None:
        self.seq += 1
        self.key[block_hash] = (priority, self.seq)
        heapq.heappush(self.heap, (priority, self.seq, block_hash))
        if len(self.heap) > 2 * len(self.key) + 64:  # stale entries: rebuild without them
            self.heap = [(p, q, h) for h, (p, q) in self.key.items()]
            heapq.heapify(self.heap)

    def touch(self, entries: OrderedDict[int, None], block_hash: int,
              priority: float | None = None) -> None:
        entries.move_to_end(block_hash)
        self._put(block_hash, self.key[block_hash][0] if priority is None else priority)

    def stored(self, block_hash: int, priority: float = 0.0) -> None:
        self._put(block_hash, priority)

    def priority(self, block_hash: int) -> float:
        return self.key[block_hash][0]

    def removed(self, block_hash: int) -> None:
        del self.key[block_hash]

    def victim(self, entries: OrderedDict[int, None]) -> int:
        heap, key = self.heap, self.key
        while key.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)
        return heap[0][2]

    def clear(self) -> None:
        self.key.clear()
        self.heap.clear()
        self.seq = 0

    def tracks(self, entries: OrderedDict[int, None]) -> bool:
        return self.key.keys() == entries.keys()


EVICTION: dict[str, type[EvictionPolicy]] = {"lru": LRU, "fifo": FIFO, "lfu": LFU,
                                             "priority": PriorityAware}


class LowerTier:
    """A CPU or storage tier: at most one entry per content hash, `used + free == total`."""

    __slots__ = ("dropped_priority", "entries", "policy", "total")

    def __init__(self, total: int, policy: EvictionPolicy) -> None:
        self.total = total
        self.policy = policy
        self.dropped_priority = 0.0  # the priority the last block dropped carried
        self.entries: OrderedDict[int, None] = OrderedDict()  # eviction order, oldest first

    @property
    def used(self) -> int:
        return len(self.entries)

    @property
    def free(self) -> int:
        return self.total - len(self.entries)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self.entries

    def touch(self, block_hash: int, priority: float | None = None) -> None:
        self.policy.touch(self.entries, block_hash, priority)

    def store(self, block_hash: int, priority: float = 0.0) -> int | None:
        """Keep a block (the caller checked it is not here) whose last user had `priority`;
        returns the hash dropped to make room, if any (its priority: `dropped_priority`)."""
        dropped = None
        if len(self.entries) >= self.total:
            dropped = self.policy.victim(self.entries)
            self.dropped_priority = self.policy.priority(dropped)
            self.remove(dropped)
        self.entries[block_hash] = None
        self.policy.stored(block_hash, priority)
        return dropped

    def remove(self, block_hash: int) -> None:
        del self.entries[block_hash]
        self.policy.removed(block_hash)

    def clear(self) -> None:
        self.entries.clear()
        self.policy.clear()
