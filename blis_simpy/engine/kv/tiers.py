"""The parts of a KV tier below the GPU: the link blocks move over, and the tier itself (a set
of content hashes with a capacity and an eviction policy).

A link serves one transfer at a time, first come first served: a transfer starts when the link
is free and takes the link's base latency plus its blocks over the link's rate. That is what a
SimPy Resource of capacity 1 would give for transfers of known length, kept as the time the
link next falls free, so it costs nothing per event and cannot deadlock: every transfer ends a
bounded time after it was asked for (the work queued before it, plus its own).
"""

from __future__ import annotations

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
    """Which hash a full tier drops, as an order kept on the tier's entries (oldest first)."""

    def touch(self, entries: OrderedDict[int, None], block_hash: int) -> None:
        """A stored block was used again (reloaded, or stored again)."""
        ...


class LRU:
    """Least recently stored or reloaded first (vLLM's CPU offloading manager)."""

    def touch(self, entries: OrderedDict[int, None], block_hash: int) -> None:
        entries.move_to_end(block_hash)


class FIFO:
    """First stored first, whatever happened since."""

    def touch(self, entries: OrderedDict[int, None], block_hash: int) -> None:
        return None


EVICTION: dict[str, type[EvictionPolicy]] = {"lru": LRU, "fifo": FIFO}


class LowerTier:
    """A CPU or storage tier: at most one entry per content hash, `used + free == total`."""

    __slots__ = ("entries", "policy", "total")

    def __init__(self, total: int, policy: EvictionPolicy) -> None:
        self.total = total
        self.policy = policy
        self.entries: OrderedDict[int, None] = OrderedDict()  # eviction order, oldest first

    @property
    def used(self) -> int:
        return len(self.entries)

    @property
    def free(self) -> int:
        return self.total - len(self.entries)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self.entries

    def touch(self, block_hash: int) -> None:
        self.policy.touch(self.entries, block_hash)

    def store(self, block_hash: int) -> int | None:
        """Keep a block (the caller checked it is not here); returns the hash dropped to make
        room, if any."""
        dropped = None
        if len(self.entries) >= self.total:
            dropped, _ = self.entries.popitem(last=False)
        self.entries[block_hash] = None
        return dropped

    def remove(self, block_hash: int) -> None:
        del self.entries[block_hash]
