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

Each LRU set is held as runs, not hash by hash. Block hashes are chains, so prompts that share
a system prompt or a conversation share whole stretches of hashes, and a routed prompt touches
such a stretch all at once: the set is a list of runs (slices of the hash sequences routed,
oldest first), and a stretch of a prompt that lies in one run is moved to the newest end as one
piece, which is what moving each of its hashes to the end in turn does. Only the hashes new to
the set, the ones evicted, and those of a run's part left behind when the rest of it moves (a
prompt's own tail, typically) are handled one by one. The order of the hashes, and so every
prediction, is the one a per-hash LRU keeps (`tests/core/test_shadow_kv.py` checks it against
an OrderedDict under random histories).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

DEFAULT_CAPACITY = 10_000  # block hashes per instance (the reference's router index)

# A block hash as the object it is: typed `int`, the compiled module would unbox each one it
# reads and box it again (a new int object, for most 64-bit hashes) for every dict operation.
Hash = object


class Run:
    """The hashes `src[lo:hi]`, consecutive in an LRU set's order, oldest first; a node of the
    set's doubly linked list of runs."""

    __slots__ = ("hi", "lo", "newer", "older", "src")

    def __init__(self, src: Sequence[Hash], lo: int, hi: int) -> None:
        self.src = src
        self.lo = lo
        self.hi = hi
        self.older: Run | None = None
        self.newer: Run | None = None


class LRUSet:
    """One instance's predicted blocks: a set of hashes in least-recently-touched order."""

    __slots__ = ("capacity", "newest", "oldest", "size", "where")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.where: dict[Hash, Run] = {}  # each hash in the set -> the run holding it
        self.oldest: Run | None = None
        self.newest: Run | None = None
        self.size = 0

    def __iter__(self) -> Iterator[Hash]:
        """The hashes, oldest first (for checks and tests; the router never iterates)."""
        run = self.oldest
        while run is not None:
            yield from run.src[run.lo:run.hi]
            run = run.newer

    def leading(self, hashes: Sequence[Hash]) -> int:
        """How many leading hashes are in the set."""
        where, n = self.where, len(hashes)
        i = 0
        while i < n:
            run = where.get(hashes[i])
            if run is None:
                break
            i += matching(run.src, position(run, hashes[i]), run.hi, hashes, i)
        return i

    def touch(self, hashes: Sequence[Hash]) -> None:
        """Each hash in turn becomes the most recently used (added if new, evicting the
        oldest beyond the capacity)."""
        where, n = self.where, len(hashes)
        i = 0
        while i < n:
            h = hashes[i]
            run = where.get(h)
            if run is None:
                self._add(hashes, i, h)
                i += 1
                continue
            start = position(run, h)
            m = matching(run.src, start, run.hi, hashes, i)
            self._move_to_newest(run, start, start + m)
            i += m

    def _add(self, hashes: Sequence[Hash], i: int, h: Hash) -> None:
        tail = self.newest
        if tail is not None and tail.src is hashes and tail.hi == i:
            tail.hi = i + 1  # the prompt's previous hash was new too: one run
            run = tail
        else:
            run = Run(hashes, i, i + 1)
            self._append(run)
        self.where[h] = run
        self.size += 1
        if self.size > self.capacity:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        run = self.oldest
        assert run is not None
        del self.where[run.src[run.lo]]
        run.lo += 1
        self.size -= 1
        if run.lo == run.hi:
            self._unlink(run)

    def _move_to_newest(self, run: Run, start: int, end: int) -> None:
        """Move the run's hashes src[start:end] to the newest end, in order. The run object
        stays with the largest of the three parts (before, moved, after), so the hashes whose
        run changes are those of the two smaller ones."""
        if run is self.newest and end == run.hi:
            return  # already the newest hashes, in this order
        lo, hi = run.lo, run.hi
        before, moved, after = start - lo, end - start, hi - end
        if moved >= before and moved >= after:
            if before:
                self._insert_before(run, self._split(run.src, lo, start))
            if after:
                self._insert_before(run, self._split(run.src, end, hi))
            run.lo, run.hi = start, end
            self._unlink(run)
            self._append(run)
            return
        piece = self._split(run.src, start, end)
        if before >= after:
            run.hi = start
            if after:
                self._insert_after(run, self._split(run.src, end, hi))
        else:
            run.lo = end
            if before:
                self._insert_before(run, self._split(run.src, lo, start))
        self._append(piece)

    def _split(self, src: Sequence[Hash], lo: int, hi: int) -> Run:
        """A new run for src[lo:hi] (hashes of an existing run), its hashes pointed at it."""
        piece = Run(src, lo, hi)
        where = self.where
        for k in range(lo, hi):
            where[src[k]] = piece
        return piece

    def _append(self, run: Run) -> None:
        self._link(self.newest, run, None)

    def _insert_before(self, anchor: Run, run: Run) -> None:
        self._link(anchor.older, run, anchor)

    def _insert_after(self, anchor: Run, run: Run) -> None:
        self._link(anchor, run, anchor.newer)

    def _link(self, older: Run | None, run: Run, newer: Run | None) -> None:
        """Put the run between two neighbours (None: the oldest or newest end)."""
        run.older, run.newer = older, newer
        if older is None:
            self.oldest = run
        else:
            older.newer = run
        if newer is None:
            self.newest = run
        else:
            newer.older = run

    def _unlink(self, run: Run) -> None:
        if run.older is None:
            self.oldest = run.newer
        else:
            run.older.newer = run.newer
        if run.newer is None:
            self.newest = run.older
        else:
            run.newer.older = run.older
        run.older = run.newer = None


def position(run: Run, h: Hash) -> int:
    """Where the hash h (in the run) is in its source sequence."""
    src, lo = run.src, run.lo
    if src[lo] == h:
        return lo
    for k in range(lo + 1, run.hi):
        if src[k] == h:
            return k
    raise AssertionError(f"hash {h} is not in its run")


def matching(src: Sequence[Hash], start: int, hi: int, hashes: Sequence[Hash], i: int) -> int:
    """How many of hashes[i:] equal src[start:hi] one for one, from the first (>= 1)."""
    k = min(hi - start, len(hashes) - i)
    if type(src) is type(hashes) and src[start:start + k] == hashes[i:i + k]:
        return k  # the common case, compared in C (the same int objects, mostly)
    m = 1
    while m < k and src[start + m] == hashes[i + m]:
        m += 1
    return m


class ShadowKV:
    """Per instance id, an LRU set of the prompt block hashes routed there."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"shadow KV capacity must be >= 1 block, got {capacity}")
        self.capacity = capacity
        self.sets: dict[str, LRUSet] = {}

    def expected_hit(self, instance: str, hashes: Sequence[Hash]) -> int:
        """How many leading blocks of a prompt the router expects `instance` to have cached."""
        seen = self.sets.get(instance)
        return 0 if seen is None else seen.leading(hashes)

    def routed(self, instance: str, hashes: Sequence[Hash]) -> None:
        """A prompt was sent to `instance`: its blocks become the most recently used there,
        the least recently used beyond the capacity are predicted evicted."""
        seen = self.sets.get(instance)
        if seen is None:
            seen = self.sets[instance] = LRUSet(self.capacity)
        seen.touch(hashes)
