"""The free KV blocks of one pool, in eviction order, without per-block dictionary churn.

The order is the one vLLM's free list keeps: allocation takes the head, release appends to the
tail, and a prefix hit revives a free block from anywhere in the list. Blocks no request has
ever used are all at the head (every release lands behind them), so they are a counter, not
entries. Released blocks sit in a list read from a head index (taking many is one slice, with
no call and no new int object per block, as a deque's popleft would need; the taken prefix is
cut off as releases append); a revived block's entry is left where it is and marked
stale (`stale` counts a block's stale entries), and skipped when it reaches the head. A block's
stale entries always precede its live one, so the first entry met with a stale count is stale.
The counts are a list indexed by block (grown to the highest block revived, like the cache's
per-block lists), not a dictionary: a hit on a long cached prompt revives one block per block.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

COMPACT_AT = 4096  # stale entries tolerated before the queue is rebuilt without them
TRIM_AT = 4096  # taken entries before the queue's head that may be cut off


class FreeList:
    """Free block ids: `fresh..total-1` never used, then `queue[head:]` (released, oldest
    first)."""

    __slots__ = ("fresh", "head", "queue", "size", "stale", "stale_count", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.fresh = 0  # the lowest block id never taken
        self.queue: list[int] = []  # entries before `head` are taken
        self.head = 0
        self.stale: list[int] = []  # per block: entries of it in `queue` that are not free
        self.stale_count = 0
        self.size = total

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        """The free blocks head first (for checks and tests; the engine never iterates)."""
        yield from range(self.fresh, self.total)
        yield from self.released()

    def released(self) -> Iterator[int]:
        """The free blocks that have been used before, head first."""
        stale = list(self.stale)
        for block in self.queue[self.head:]:
            if block < len(stale) and stale[block]:
                stale[block] -= 1
            else:
                yield block

    def take_one(self) -> int:
        """Remove and return the head; the caller made sure the list is not empty."""
        self.size -= 1
        block = self.fresh
        if block < self.total:
            self.fresh = block + 1
            return block
        if not self.stale_count:
            head = self.head
            self.head = head + 1
            return self.queue[head]
        return self._pop_released()

    def take(self, count: int) -> list[int]:
        """Remove and return the first `count` blocks, head first; the caller made sure they
        are there."""
        fresh = self.fresh
        new = min(count, self.total - fresh)
        self.size -= count
        rest = count - new
        if not new and not self.stale_count:  # (the usual case once the pool has cycled)
            head = self.head
            self.head = head + rest
            return self.queue[head:head + rest]
        taken = list(range(fresh, fresh + new))
        self.fresh = fresh + new
        if rest:
            if self.stale_count:
                for _ in range(rest):
                    taken.append(self._pop_released())
            else:
                head = self.head
                self.head = head + rest
                taken.extend(self.queue[head:head + rest])
        return taken

    def push(self, block: int) -> None:
        """A block became free: it goes to the tail."""
        self.queue.append(block)
        self.size += 1
        if self.head >= TRIM_AT:
            self._trim()

    def extend(self, blocks: Iterable[int]) -> None:
        """Blocks became free, in this order: they go to the tail."""
        before = len(self.queue)
        self.queue.extend(blocks)
        self.size += len(self.queue) - before
        if self.head >= TRIM_AT:
            self._trim()

    def _trim(self) -> None:
        """Cut off the taken entries (they hold their ids' int objects) once they are an
        eighth of the queue: at most ~4K of them in a pool of ~30K blocks, and each entry is
        moved a bounded number of times."""
        if 8 * self.head >= len(self.queue):
            del self.queue[:self.head]
            self.head = 0

    def remove(self, block: int) -> None:
        """A free block (a released one) is revived by a prefix hit: its entry goes stale."""
        self.remove_all([block])

    def remove_all(self, blocks: list[int]) -> None:
        """`remove` for each of these free blocks, at once (a cached prompt revives dozens;
        the compaction, which changes no order, is considered once)."""
        stale = self.stale
        top = max(blocks)
        if top >= len(stale):
            stale.extend([0] * (max(top + 1, 2 * len(stale), 1024) - len(stale)))
        for block in blocks:
            stale[block] += 1
        self.stale_count += len(blocks)
        self.size -= len(blocks)
        if self.stale_count > COMPACT_AT and self.stale_count > (len(self.queue) - self.head) // 2:
            self._compact()

    def _pop_released(self) -> int:
        queue, stale = self.queue, self.stale
        size = len(stale)
        head = self.head
        while True:
            block = queue[head]
            head += 1
            if block >= size or not stale[block]:
                self.head = head
                return block
            stale[block] -= 1
            self.stale_count -= 1

    def _compact(self) -> None:
        """Drop the stale entries, so the queue stays proportional to the free blocks."""
        stale = self.stale
        size = len(stale)
        live = []
        for block in self.queue[self.head:]:
            if block < size and stale[block]:
                stale[block] -= 1
            else:
                live.append(block)
        self.queue = live
        self.head = 0
        self.stale_count = 0  # every count is back to 0
