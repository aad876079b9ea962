"""The GPU KV cache with tiers below it: a CPU tier and an optional storage tier, keyed by
content hash (engine.kv_tiers; config/kv_tiers.py).

The GPU side is `cache.KVCache` unchanged; the tiers are consulted only where the GPU cache
misses or drops content, so an instance without tiers keeps the plain cache and pays nothing.

- Offload, `mirror` (vLLM v1's OffloadingConnector, LMCache): every full hashed block is copied
  to the CPU tier when it is computed (prefill, or the decode token that fills it), unless the
  CPU tier has it already. `threshold`: a cached block is copied when the GPU evicts it to make
  room while GPU use is at or above the threshold. Either way the copy keeps the GPU block (it
  is not wiped, unlike the reference) and its time runs on the offload link beside the step
  (stores are asynchronous in vLLM); it is not charged to any step.
- `lazy` (seed 001 §6 OffloadPolicy "lazy"): a cached block is copied only when the GPU evicts
  it, whatever the GPU's use: offload on eviction pressure, never ahead of it.
- A full CPU tier drops a block by its eviction policy (LRU by default, FIFO, or LFU); with a
  storage tier the dropped block moves there (over the storage link), and a full storage tier
  drops its own. A hash is in at most one lower tier, once: the invariant `check()` keeps.
- Reload: at admission the cached prefix is looked up block by block, GPU first, then CPU,
  then storage, and stops at the first block no tier has. The lower-tier blocks of that prefix
  (only those) get fresh GPU blocks, which belong to the request at once, so nothing can evict
  or overwrite them, and are registered under their hash so later requests hit them on the GPU.
  The transfer is queued on the tier's reload link (CPU -> GPU and storage -> GPU are separate
  links, as is each direction of PCIe) and the step that admits the request waits for it: the
  step is charged the time from its start to the end of the last reload it asked for, links
  running in parallel and transfers on one link one after the other. The tier keeps its copy
  (a mirror), touched in its eviction order.
- Thrashing: a reload of a block the GPU evicted less than `thrash_window_s` ago.
"""

from __future__ import annotations

from collections.abc import Callable

from blis_simpy.config.kv_tiers import KVLinkConfig, KVTiersConfig
from blis_simpy.config.scenario import EngineConfig
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.request import Request
from blis_simpy.core.tier_records import TierLog
from blis_simpy.core.units import us
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.checked import checked
from blis_simpy.engine.kv.pool import PrefixHit
from blis_simpy.engine.kv.tiers import EVICTION, Link, LowerTier

ON_CPU = -1  # a prefix block found on the CPU tier (PrefixHit.blocks), to be reloaded
ON_STORAGE = -2


def link(config: KVLinkConfig) -> Link:
    assert config.blocks_per_s is not None  # resolve() filled it
    return Link(config.base_latency_us, config.blocks_per_s)


def tiered_pool(engine: EngineConfig, clock: Callable[[], int], block_bytes: int,
                checks: bool) -> TieredKVCache:
    """One instance's tiered pool; `block_bytes` (0 if unknown) only labels the records."""
    tiers = engine.kv_tiers
    kind = pool_class(tiers)
    pool_type = checked(kind) if checks else kind
    log = TierLog(tiers.cpu_blocks, tiers.storage_blocks, block_bytes)
    pool = pool_type(engine.kv_blocks or 0, engine.block_size, tiers, clock, log)
    return pool


def pool_class(tiers: KVTiersConfig) -> type[TieredKVCache]:
    """The tiered pool for these tiers' eviction policy."""
    return PriorityTieredKVCache if tiers.eviction == "priority" else TieredKVCache


class TieredKVCache(KVCache):
    """`KVCache` plus lower tiers. `used + free == total` holds on every tier."""

    __slots__ = ("charged_until", "clock", "cpu", "cpu_down", "cpu_up", "evicted_at", "log",
                 "mirror", "priorities", "storage", "storage_down", "storage_up", "threshold",
                 "window")

    def __init__(self, total_blocks: int, block_size: int, tiers: KVTiersConfig,
                 clock: Callable[[], int], log: TierLog) -> None:
        super().__init__(total_blocks, block_size, defer_index=False)  # it reads the index
        policy = EVICTION[tiers.eviction]
        self.cpu = LowerTier(tiers.cpu_blocks, policy())
        self.cpu_up, self.cpu_down = link(tiers.cpu_link), link(tiers.cpu_link)
        self.storage = LowerTier(tiers.storage_blocks, policy()) if tiers.storage_blocks \
            else None
        self.storage_up = self.storage_down = None
        if self.storage is not None:
            self.storage_up, self.storage_down = link(tiers.storage_link), \
                link(tiers.storage_link)
        self.mirror = tiers.offload == "mirror"
        # threshold offload: used blocks; lazy offload keeps every evicted block (0)
        self.threshold = 0 if tiers.offload == "lazy" else tiers.threshold * total_blocks
        self.window = us(tiers.thrash_window_s)
        self.clock = clock
        self.log = log
        self.evicted_at: dict[int, int] = {}  # hash with a lower-tier copy -> GPU eviction time
        # priority eviction: a cached GPU block's hash -> the priority of the request that
        # released it last (what the block carries down when it is offloaded); else None
        self.priorities: dict[int, float] | None = {} if tiers.eviction == "priority" else None
        self.charged_until = 0  # reload time up to here is already charged to the step

    def cpu_utilization(self) -> float:
        return self.cpu.used / self.cpu.total

    def wipe(self) -> None:
        """The node's host memory and disk go with the instance: the lower tiers too, and
        the transfers under way on its links."""
        super().wipe()
        self.cpu.clear()
        if self.storage is not None:
            self.storage.clear()
        for each in (self.cpu_up, self.cpu_down, self.storage_up, self.storage_down):
            if each is not None:
                each.free_at = 0
        self.evicted_at = {}
        self.charged_until = 0
        if self.priorities is not None:
            self.priorities = {}

    # -- lookup and reload ------------------------------------------------------------------

    def lookup(self, req: Request, tokens: int) -> PrefixHit:
        """The longest prefix any tier holds: GPU block ids, ON_CPU or ON_STORAGE per block."""
        found = []
        index, cpu, storage = self.index, self.cpu.entries, self.storage
        for h in req.hashes[: tokens // self.block_size]:
            block = index.get(h)
            if block is None:
                if h in cpu:
                    block = ON_CPU
                elif storage is not None and h in storage:
                    block = ON_STORAGE
                else:
                    break
            found.append(block)
        return PrefixHit(found)

    def admit(self, req: Request, hit: PrefixHit, start: int, tokens: int) -> bool:
        found = hit.blocks
        on_gpu = [b for b in found if b >= 0]
        if len(on_gpu) == len(found):
            return super().admit(req, hit, start, tokens)
        # Reloaded blocks need fresh GPU blocks: `can_admit` counts them with the new ones.
        if not self.can_admit(on_gpu, start, tokens):
            return False
        refcount = self.refcount
        for block in on_gpu:  # owned first, so taking fresh blocks cannot evict them
            if refcount[block] == 0:
                self.free.remove(block)
                self.used += 1
            refcount[block] += 1
        self.hits += len(on_gpu)
        self._touch(req, found)  # before taking fresh blocks, whose eviction may offload
        fresh = iter(self._take_blocks(len(found) - len(on_gpu)))
        from_cpu: list[int] = []
        from_storage: list[int] = []
        for i, block in enumerate(found):
            if block < 0:
                h = req.hashes[i]
                (from_cpu if block == ON_CPU else from_storage).append(h)
                block = next(fresh)
                self._fill(block, h)
            req.blocks.append(block)
        self.used += len(from_cpu) + len(from_storage)
        hit.load_us = self._reload(from_cpu, from_storage)
        self.allocate(req, start, tokens)
        return True

    def _touch(self, req: Request, found: list[int]) -> None:
        """The lower-tier blocks about to be reloaded are used (by `req`): their tier's order
        learns it."""
        storage, priority = self.storage, req.priority
        for h, where in zip(req.hashes, found, strict=False):
            if where == ON_CPU:
                self.cpu.touch(h, priority)
            elif where == ON_STORAGE and storage is not None:
                storage.touch(h, priority)

    def _fill(self, block: int, block_hash: int) -> None:
        """A fresh GPU block receives a reloaded block's content (and its hash)."""
        old = self.hash_of(block)
        if old is not None and self.index.get(old) == block:
            del self.index[old]
        self.set_hash(block, block_hash)
        self.index[block_hash] = block
        self.refcount[block] = 1

    def _reload(self, from_cpu: list[int], from_storage: list[int]) -> int:
        """Queue the reloads and count them; returns the time they add to this step."""
        now, log = self.clock(), self.log
        end = now
        if from_cpu:
            end = self.cpu_up.transfer(now, len(from_cpu))
            log.cpu_hits += len(from_cpu)
            log.transfer(now, "cpu", "gpu", len(from_cpu), end)
        if from_storage:
            assert self.storage is not None and self.storage_up is not None
            done = self.storage_up.transfer(now, len(from_storage))
            end = max(end, done)
            log.storage_hits += len(from_storage)
            log.transfer(now, "storage", "gpu", len(from_storage), done)
        log.reloads += len(from_cpu) + len(from_storage)
        evicted_at, window = self.evicted_at, self.window
        for h in from_cpu + from_storage:
            at = evicted_at.pop(h, None)
            if at is not None and now - at < window:
                log.thrashes.append(now)
        charged = max(now, self.charged_until)
        added = max(0, end - charged)
        self.charged_until = max(charged, end)
        log.reload_us += added
        return added

    # -- offload ----------------------------------------------------------------------------

    def _register(self, req: Request, first: int, last: int) -> None:
        super()._register(req, first, last)
        if self.mirror:
            self._offload(req.hashes[first:last], req.priority)

    def publish(self, req: Request, position: int) -> None:
        super().publish(req, position)
        i = position // self.block_size
        if self.mirror and i < len(req.hashes):
            self._offload(req.hashes[i:i + 1], req.priority)

    def open_block(self, req: Request) -> bool:
        """As the plain cache, with the eviction of the block's old content seen."""
        free = self.free
        if not free.size:
            return False
        block = free.take_one()
        if block >= len(self.refcount):
            self._grow()
        old = self.hash_of(block)
        if old is not None:
            if self.index.get(old) == block:
                del self.index[old]
            self.keyed[block] = 0
            self._evicted([old], self.used)
        self.refcount[block] = 1
        req.blocks.append(block)
        self.used += 1
        self.misses += 1
        return True

    def _take_blocks(self, count: int) -> list[int]:
        """Fresh GPU blocks; cached content they held is evicted (and, under threshold
        offload with the GPU this full, copied to the CPU tier first)."""
        used = self.used
        taken = super()._take_blocks(count)
        hash_of = self.hash_of
        evicted = [h for b in taken if (h := hash_of(b)) is not None]
        if evicted:
            self._evicted(evicted, used)
        return taken

    def _evicted(self, hashes: list[int], used: int) -> None:
        """The GPU dropped these cached blocks (with `used` blocks in use): threshold offload
        copies them first; the ones a lower tier holds are timed for thrash detection."""
        now = self.clock()
        self.log.evictions += len(hashes)
        priorities = self.priorities
        carried = None if priorities is None else [priorities.pop(h, 0.0) for h in hashes]
        if not self.mirror and used >= self.threshold:
            self._offload(hashes, carried)
        cpu, storage, evicted_at = self.cpu.entries, self.storage, self.evicted_at
        for h in hashes:
            if h in cpu or (storage is not None and h in storage):
                evicted_at[h] = now

    def _offload(self, hashes: list[int], priority: float | list[float] | None = None
                 ) -> None:
        """Copy these GPU blocks to the CPU tier (those it lacks), pushing what it drops down
        to storage or out. `priority`: their last user's (one for all, or one each), which
        priority eviction keeps with them."""
        cpu, storage = self.cpu, self.storage
        new = [h for h in hashes if h not in cpu.entries]
        if not new:
            return
        of: dict[int, float] = {}
        if self.priorities is not None and priority is not None:  # priority eviction
            each = priority if isinstance(priority, list) else [priority] * len(hashes)
            of = dict(zip(hashes, each, strict=True))
        now, log = self.clock(), self.log
        demoted: list[tuple[int, float]] = []
        for h in new:
            if storage is not None and h in storage.entries:
                storage.remove(h)  # back up a tier: one lower-tier copy per hash
            dropped = cpu.store(h, of.get(h, 0.0))
            if dropped is not None:
                demoted.append((dropped, cpu.dropped_priority))
        log.offload_us += self.cpu_down.send(now, len(new))
        log.offloads += len(new)
        log.transfer(now, "gpu", "cpu", len(new), self.cpu_down.free_at)
        if demoted:
            self._demote(demoted, now)
        log.level(now, cpu.used, 0 if storage is None else storage.used)

    def _demote(self, hashes: list[tuple[int, float]], now: int) -> None:
        """Blocks the CPU tier dropped (with their priorities): into storage when there is
        one, else gone."""
        storage, evicted_at = self.storage, self.evicted_at
        if storage is None or self.storage_down is None:
            for h, _ in hashes:
                evicted_at.pop(h, None)
            return
        for h, priority in hashes:
            dropped = storage.store(h, priority)
            if dropped is not None:
                evicted_at.pop(dropped, None)
        self.log.offloads += len(hashes)
        self.log.offload_us += self.storage_down.send(now, len(hashes))
        self.log.transfer(now, "cpu", "storage", len(hashes), self.storage_down.free_at)

    # -- checks -------------------------------------------------------------------------------

    def check(self) -> None:
        """The GPU cache's checks, plus: every tier conserves its blocks, and a hash has at
        most one lower-tier copy."""
        super().check()
        tiers = [self.cpu] if self.storage is None else [self.cpu, self.storage]
        for tier in tiers:
            if tier.used + tier.free != tier.total or not 0 <= tier.used <= tier.total:
                raise InvariantError(f"lower KV tier not conserved: {tier.used} used of "
                                     f"{tier.total}")
            if not tier.policy.tracks(tier.entries):
                raise InvariantError("a lower KV tier's eviction order lost track of its "
                                     "blocks")
        if self.storage is not None and not self.cpu.entries.keys().isdisjoint(
                self.storage.entries):
            raise InvariantError("a KV block hash is on both the CPU and the storage tier")


class PriorityTieredKVCache(TieredKVCache):
    """Tiers under priority eviction: the GPU cache notes the priority of the request that
    releases each cached block, which the block carries down if it is offloaded (a subclass,
    so the other policies' releases stay the compiled cache's own)."""

    __slots__ = ()

    def release(self, req: Request) -> None:
        priorities = self.priorities
        assert priorities is not None
        hash_of, priority = self.hash_of, req.priority
        for block in req.blocks:
            h = hash_of(block)
            if h is not None:
                priorities[h] = priority
        super().release(req)

    def check(self) -> None:
        """The tiered checks, plus: only blocks cached on the GPU carry a noted priority (the
        notes cannot outgrow the GPU cache)."""
        super().check()
        assert self.priorities is not None
        cached = {self.hash_of(b) for b in self.hashed_blocks()}
        if not cached.issuperset(self.priorities):
            raise InvariantError("a KV priority is noted for a block the GPU does not hold")
