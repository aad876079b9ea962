"""Paged KV cache with prefix caching and LRU reuse of freed blocks (vLLM's design).

Free blocks form one ordered list (`freelist.FreeList`): allocation takes the head, release
appends to the tail, and a freed block keeps its hash so a later request can revive it (a prefix
hit). So the head is always the least recently freed block: LRU eviction of cached content, tail
blocks of a request first. The per-block lists grow with the blocks ever taken, not the pool's
size, so a large pool costs nothing until it is used.
Every block a request owns holds tokens of that request's sequence in order; a block's hash is
registered when the block becomes full. Compat mode uses `reference.ReferenceKVCache`, the
reference's accounting, defects included.

The hash index is deferred while no prefix can hit. Block hashes are chains (a block's hash
covers every token before it), so two requests share a cached prefix only if their first block
hashes are equal, and a request meets its own blocks again only when it holds blocks here a
second time (after a preemption). Until a request starts holding blocks with a first block hash
that an earlier holder had, every lookup misses and no hash is on two blocks, so the index
would be exactly `{hash of b: b}`: it is not kept (a dictionary insert and delete per block
saved) and is built from the blocks' hashes the first time a lookup could hit. Pools whose
blocks get hashes without an allocation by their holder (P/D decode pools, tiered pools) keep
the index from the start.
"""

from __future__ import annotations

from collections.abc import Sequence

from librt.vecs import extend, vec
from mypy_extensions import i32, i64, mypyc_attr, u8

from blis_simpy.core.errors import InvariantError
from blis_simpy.core.request import Request
from blis_simpy.engine.kv.freelist import FreeList
from blis_simpy.engine.kv.pool import PrefixHit

GROW_MIN = 1024  # blocks the per-block lists grow by at least
SIGN = 1 << 63
TWO64 = 1 << 64


def unsigned(key: i64) -> int:
    """A block's key (`Request.keys`: a hash's int64 bit pattern) as the hash itself."""
    return int(key) + TWO64 if key < 0 else int(key)


def signed(h: int) -> i64:
    """A block hash (0 <= h < 2^64) as its key."""
    return i64(h - TWO64) if h >= SIGN else i64(h)


class Zeros:
    """Zero-filled vectors the per-block vectors grow by, copied in bulk (a vector extended
    from a list converts each int: ~20x the cost of a copy, a few ms an evaluation)."""

    def __init__(self) -> None:
        self.i32: vec[i32] = vec[i32]()
        self.i64: vec[i64] = vec[i64]()
        self.u8: vec[u8] = vec[u8]()

    def hold(self, n: int) -> None:
        """At least `n` zeros in each (kept for the process's later pools)."""
        if len(self.i32) < n:
            size = max(n, 2 * len(self.i32))
            self.i32 = vec[i32]([0] * size)
            self.i64 = vec[i64]([0] * size)
            self.u8 = vec[u8]([0] * size)


ZEROS = Zeros()


# Subclassed by pools that are not compiled (tiered.py) and at run time (checked.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class KVCache:
    """Block accounting for one instance. `used + len(free) == total` after every operation.

    The per-block state is in native vectors, so taking and registering a block makes and
    frees no int object (in a large pool those objects are all cold); a vector that grows is
    replaced, so take a local alias of one only after taking blocks. A block's hash is kept
    as its key, the hash's int64 bit pattern (`Request.keys`), in `keys[block]`, valid where
    `keyed[block]` is 1; `hash_of` gives the hash back as an int. The index is keyed by the
    hashes."""

    __slots__ = ("block_size", "deferred", "failures", "first_hashes", "free", "hits", "index",
                 "keyed", "keys", "misses", "refcount", "total", "used")

    def __init__(self, total_blocks: int, block_size: int, defer_index: bool = True) -> None:
        self.total = total_blocks
        self.block_size = block_size
        # per block ever taken (the vectors grow with `free.fresh`): its holders, its key
        self.refcount: vec[i32] = vec[i32]()
        self.keys: vec[i64] = vec[i64]()  # (where `keyed`)
        self.keyed: vec[u8] = vec[u8]()
        self.free = FreeList(total_blocks)
        self.index: dict[int, int] = {}  # block hash -> block id (the last registration wins)
        self.deferred = defer_index  # the index is not kept yet (module docstring)
        # While deferred: the first block hash of every holder whose first block still holds
        # it (a reused block's hash leaves): at most one a block, not one a request ever seen.
        self.first_hashes: set[int] = set()
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.failures = 0  # allocations at completion that found no block (the reference's)

    @property
    def free_blocks(self) -> int:
        return len(self.free)

    @property
    def utilization(self) -> float:
        return self.used / self.total

    def cpu_utilization(self) -> float:
        """The CPU tier's use: none here (engine/kv/tiered.py has one)."""
        return 0.0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def hash_of(self, block: int) -> int | None:
        """The block's hash, None if it has none."""
        return unsigned(self.keys[block]) if self.keyed[block] else None

    def hashed_blocks(self) -> list[int]:
        """Every block that has a hash, in block order."""
        keyed = self.keyed
        return [b for b in range(len(keyed)) if keyed[b]]

    def set_hash(self, block: int, h: int) -> None:
        """Give the block this hash (the index is the caller's)."""
        self.keys[block] = signed(h)
        self.keyed[block] = 1

    def lookup(self, req: Request, tokens: int) -> PrefixHit:
        """Blocks holding the longest cached prefix of the request's first `tokens` tokens."""
        found: list[int] = []
        index, hashes = self.index, req.hashes
        if self.deferred:
            if not hashes or hashes[0] not in self.first_hashes:
                return PrefixHit(found)
            self.keep_index()
        for i in range(min(tokens // self.block_size, len(hashes))):
            block = index.get(hashes[i])
            if block is None:
                break
            found.append(block)
        return PrefixHit(found)

    def cached_prefix(self, hashes: Sequence[int]) -> int:
        """How many of these chained block hashes, from the first on, a lookup would find
        cached now: what the instance tells a router that reads its real cache (a lookup's
        count, without a request and without counting a hit)."""
        if self.deferred:
            if not hashes or hashes[0] not in self.first_hashes:
                return 0
            self.keep_index()
        index = self.index
        count = 0
        for h in hashes:
            if h not in index:
                break
            count += 1
        return count

    def cached_hashes(self) -> set[int]:
        """Every block hash a lookup could find now (a router's copy of the cache's state)."""
        if self.deferred:
            keys = self.keys
            return {unsigned(keys[b]) for b in self.hashed_blocks()}
        return set(self.index)

    def admit(self, req: Request, hit: PrefixHit, start: int, tokens: int) -> bool:
        """Admit a waiting request: its cached prefix blocks plus room for positions
        [start, start+tokens); all or nothing."""
        if not self.can_admit(hit.blocks, start, tokens):
            return False
        self.attach(req, hit.blocks)
        self.allocate(req, start, tokens)
        return True

    def holds_first_blocks(self, req: Request) -> None:
        """A request starts holding blocks in a deferred pool (it will allocate now). If a
        request with the same first block hash held blocks here before, a lookup can hit from
        now on: keep the index."""
        hashes = req.hashes
        if hashes:
            if hashes[0] in self.first_hashes:
                self.keep_index()
            else:
                self.first_hashes.add(hashes[0])

    def keep_index(self) -> None:
        """Stop deferring the index: build it from the blocks' hashes (each on one block)."""
        if not self.deferred:
            return
        self.deferred = False
        self.first_hashes = set()
        index, keys = self.index, self.keys
        for block in self.hashed_blocks():
            index[unsigned(keys[block])] = block

    def prefill_blocks(self, req: Request, start: int, tokens: int) -> int:
        """Free blocks a running request's prefill chunk [start, start+tokens) takes."""
        return -(-(start + tokens) // self.block_size) - len(req.blocks)

    def can_admit(self, cached: list[int], start: int, tokens: int) -> bool:
        """Whether cached blocks plus fresh ones for [start, start+tokens) fit right now."""
        refcount = self.refcount
        revived = sum(1 for b in cached if refcount[b] == 0)
        need = self.blocks_for(start + tokens) - len(cached)
        return need + revived <= len(self.free)

    def attach(self, req: Request, cached: list[int]) -> None:
        """Give a request the cached blocks of its prefix (a hit per block); the free ones
        among them leave the free list in one call (a long cached prompt revives dozens)."""
        refcount = self.refcount
        revived = []
        for block in cached:
            if refcount[block] == 0:
                revived.append(block)
            refcount[block] += 1
        if revived:
            self.free.remove_all(revived)
            self.used += len(revived)
        req.blocks.extend(cached)
        self.hits += len(cached)

    def allocate(self, req: Request, start: int, tokens: int) -> bool:
        """Room for sequence positions [start, start+tokens); all or nothing."""
        end = start + tokens
        blocks = req.blocks
        need = -(-end // self.block_size) - len(blocks)
        if need > len(self.free):
            return False
        if self.deferred and not blocks:
            self.holds_first_blocks(req)
        if need > 0:
            self._take(blocks, need)
        bs = self.block_size
        first, last = start // bs, end // bs
        if first < last:
            self._register(req, first, last)
        return True

    def open_block(self, req: Request) -> bool:
        """A decode token that starts a new block: one block from the free head."""
        free = self.free
        if not free.size:
            return False
        block = free.take_one()
        if block >= len(self.refcount):
            self._grow()
        if self.keyed[block]:
            old = unsigned(self.keys[block])
            if self.deferred:  # its holder's first block, if it was one, is gone
                self.first_hashes.discard(old)
            elif self.index.get(old) == block:
                del self.index[old]
            self.keyed[block] = 0
        self.refcount[block] = 1
        req.blocks.append(block)
        self.used += 1
        self.misses += 1
        return True

    def publish(self, req: Request, position: int) -> None:
        """The decode token at `position` just filled the request's last block: register
        its hash."""
        i = position // self.block_size
        if i < len(req.hashes):
            block = req.blocks[i]
            if not self.keyed[block]:
                self.keys[block] = req.block_keys()[i]
                self.keyed[block] = 1
                if not self.deferred:
                    self.index[req.hashes[i]] = block

    def _take(self, blocks: list[int], need: int) -> None:
        taken = self._take_blocks(need)
        keys, keyed, index, refcount = self.keys, self.keyed, self.index, self.refcount
        keep, first_hashes = not self.deferred, self.first_hashes
        for block in taken:
            if keyed[block]:
                old = unsigned(keys[block])
                if keep:
                    if index.get(old) == block:
                        del index[old]
                else:  # its holder's first block, if it was one, is gone
                    first_hashes.discard(old)
                keyed[block] = 0
            refcount[block] = 1
        blocks.extend(taken)
        self.used += need
        self.misses += need

    def _take_blocks(self, count: int) -> list[int]:
        """The free list's first `count` blocks, with room for them in the per-block lists."""
        taken = self.free.take(count)
        if self.free.fresh > len(self.refcount):
            self._grow()
        return taken

    def _grow(self) -> None:
        """Extend the per-block lists to cover every block taken so far (doubling, so a run
        pays for the blocks it uses)."""
        size = len(self.refcount)
        new = min(self.total, max(self.free.fresh, 2 * size, GROW_MIN)) - size
        zeros = ZEROS
        zeros.hold(new)
        self.refcount = extend(self.refcount, zeros.i32[:new])
        self.keys = extend(self.keys, zeros.i64[:new])
        self.keyed = extend(self.keyed, zeros.u8[:new])

    def _register(self, req: Request, first: int, last: int) -> None:
        """Publish the hashes of the request's blocks first..last-1, which are now full."""
        hashes, blocks, keys, keyed = req.hashes, req.blocks, self.keys, self.keyed
        index, mine = self.index, req.block_keys()
        last = min(last, len(hashes))
        keep = not self.deferred
        for i in range(first, last):  # (indexed: a zip of two slices is a generic call here)
            block = blocks[i]
            if not keyed[block]:
                keys[block] = mine[i]
                keyed[block] = 1
                if keep:
                    index[hashes[i]] = block

    def complete(self, req: Request) -> None:
        """The request finished: release its blocks."""
        self.release(req)

    def release(self, req: Request) -> None:
        """Drop the request's references, last block first, so its tail is evicted first."""
        refcount = self.refcount
        blocks = req.blocks
        for block in blocks:
            if refcount[block] != 1:
                break
        else:  # no block shared (the usual case): all go, and their id objects with them
            for block in blocks:
                refcount[block] = 0
            self.free.extend(blocks[::-1])
            self.used -= len(blocks)
            req.blocks = []
            return
        freed = []
        for block in reversed(req.blocks):
            count = refcount[block] - 1
            refcount[block] = count
            if not count:
                freed.append(block)
        self.free.extend(freed)
        self.used -= len(freed)
        req.blocks = []

    def wipe(self) -> None:
        """The instance failed: the cached content is lost and the pool is as new (its hit
        counters kept). Every holder has released its blocks first."""
        if self.used:
            raise InvariantError(f"KV pool wiped while {self.used} blocks are held")
        self.refcount = vec[i32]()
        self.keys = vec[i64]()
        self.keyed = vec[u8]()
        self.free = FreeList(self.total)
        self.index = {}
        self.first_hashes = set()

    def check(self) -> None:
        """Invariant check for tests and debug runs: conservation and refcount agreement."""
        if self.used + len(self.free) != self.total:
            raise InvariantError(f"KV blocks not conserved: {self.used} used + "
                                 f"{len(self.free)} free != {self.total}")
        if self.used != sum(1 for c in self.refcount if c > 0):
            raise InvariantError("KV used count drifted from the referenced blocks")
        refcount = self.refcount
        if any(refcount[b] for b in self.free.released()) or any(refcount[self.free.fresh:]):
            raise InvariantError("a free KV block is referenced")
        if self.deferred:
            keys = self.keys
            hashes = [keys[b] for b in self.hashed_blocks()]
            if self.index or len(set(hashes)) != len(hashes):
                raise InvariantError("a deferred KV index has entries, or a hash on two "
                                     "blocks (the index it stands for would be wrong)")

