"""The reference's KV block accounting, defects included, for compat mode (spec engine.md §4;
Go `sim/kvcache.go` and the completion allocation in `sim/simulator.go`). Native runs use the
exact `KVCache`; docs/differences-from-blis.md lists each rule next to the correct behaviour.
"""

from __future__ import annotations

from librt.vecs import extend, vec
from mypy_extensions import i32, mypyc_attr

from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import ZEROS, KVCache, unsigned
from blis_simpy.engine.kv.pool import PrefixHit


@mypyc_attr(allow_interpreted_subclasses=True)  # checked.py subclasses it at run time
class ReferenceKVCache(KVCache):
    """The reference's block accounting (spec engine.md §4, Go `sim/kvcache.go`), for compat
    mode. Where it differs from `KVCache`:

    * Taking a block from the free list deletes the block's old hash key from the index even
      when that key now points to another block (a later registration of the same prefix),
      so that prefix stops hitting.
    * A prefill chunk always takes ceil(tokens / block size) new blocks, after topping up
      the partial last block, so a chunk can leave a block partly filled or empty (Q7); the
      blocks after it then do not start at multiples of the block size. A block's hash covers
      the request's tokens up to its end; one ending off a block boundary never hits.
      A decode token tops up the last block while it is partly filled, else takes a new one.
    * A full prefix hit (nothing left to compute) takes no references and counts no hits
      (Q8); the request's first decode token then takes a block whose content starts at its
      output (those blocks' hashes are never looked up).
    * Admitting a request references its cached blocks (reviving free ones) before taking
      new blocks; if the free list runs out meanwhile, everything is rolled back: taken blocks
      get their old hashes back and, like revived blocks, return to the free list's tail.
    * At completion one more token is allocated (a failure counts in `failures`), then the
      blocks are released.

    `Request.kv_phase` tells the instance where the request's decode blocks start: a decode
    token at position p opens a block when (p - kv_phase) % block size == 0.
    """

    __slots__ = ("fill", "hollow", "outputs_only")

    def __init__(self, total_blocks: int, block_size: int, defer_index: bool = True) -> None:
        super().__init__(total_blocks, block_size, defer_index)
        self.fill: vec[i32] = vec[i32]()  # tokens in each block (kept up to date in prefill)
        self.outputs_only: set[Request] = set()  # full prefix hits: their blocks hold output only
        # Requests holding a cached block whose tokens a rollback dropped (its hash stays):
        # the reference hashes a block filled by top-up over the tokens of all the request's
        # blocks, so for these that hash misses the dropped tokens and never hits.
        self.hollow: set[Request] = set()

    def admit(self, req: Request, hit: PrefixHit, start: int, tokens: int) -> bool:
        if tokens == 0:  # a full prefix hit: nothing to place (Q8)
            self.outputs_only.add(req)
            req.kv_phase = start % self.block_size
            return True
        return self._prefill(req, start, tokens, hit.blocks)

    def prefill_blocks(self, req: Request, start: int, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, req: Request, start: int, tokens: int) -> bool:
        if start < req.prefill_target:
            return self._prefill(req, start, tokens, [])
        return self._decode(req, start)

    def open_block(self, req: Request) -> bool:
        """`_pop(1)`, inlined: this runs for one decode token in every block size."""
        free = self.free
        if not free.size:
            return False
        block = free.take_one()
        if block >= len(self.refcount):
            self._grow()
        keyed = self.keyed
        if keyed[block]:
            if not self.deferred:
                self.index.pop(unsigned(self.keys[block]), None)
            keyed[block] = 0
        self.fill[block] = 1
        self.refcount[block] = 1
        self.used += 1
        self.misses += 1
        req.blocks.append(block)
        return True

    def publish(self, req: Request, position: int) -> None:
        """`_top_up_full` of the last block, inlined: this runs as often as `open_block`."""
        bs = self.block_size
        block = req.blocks[-1]
        self.fill[block] = bs
        end = position + 1
        if end % bs or self._not_keyed(req):
            self.keyed[block] = 0
            return
        i = end // bs - 1
        keys = req.keys  # made, or empty (`Request.keys`): no read of `hashes` here
        if not keys:
            keys = req.block_keys()
        self.keys[block] = keys[i]
        self.keyed[block] = 1
        if not self.deferred:
            self.index[req.hashes[i]] = block

    def complete(self, req: Request) -> None:
        if req.output_len > 0 and not self._decode(req, req.progress):
            self.failures += 1
        self.release(req)

    def release(self, req: Request) -> None:
        if self.outputs_only:
            self.outputs_only.discard(req)
        if self.hollow:
            self.hollow.discard(req)
        super().release(req)

    def wipe(self) -> None:
        super().wipe()
        self.fill = vec[i32]()
        self.outputs_only = set()
        self.hollow = set()

    def _decode(self, req: Request, position: int) -> bool:
        """One decode token: top up the last block, or take a new one."""
        slot = (position - req.kv_phase) % self.block_size
        if slot == 0 or not req.blocks:
            if not self.free.size:
                return False
            req.blocks.append(self._pop(self._take_blocks(1)[0], 1))
        elif slot == self.block_size - 1:
            self._top_up_full(req, req.blocks[-1], position + 1)
        return True

    def _prefill(self, req: Request, start: int, tokens: int, cached: list[int]) -> bool:
        bs = self.block_size
        need = -(-tokens // bs)
        if need > self.free.size:
            return False
        blocks, fill = req.blocks, self.fill
        if self.deferred and not blocks:  # (a rollback below needs cached blocks: none here)
            self.holds_first_blocks(req)
        placed = 0
        if not blocks:
            self.attach(req, cached)
            if any(fill[b] != bs for b in cached):
                self.hollow.add(req)
        else:
            last = blocks[-1]
            if 0 < fill[last] < bs:
                placed = min(bs - fill[last], tokens)
                fill[last] += placed
                if fill[last] == bs:
                    self._top_up_full(req, last, start + placed)
        if placed < tokens:
            if self.free.size < need:  # reviving cached blocks used up the room: undo all
                taken = []  # (block, its hash before it was taken)
                while self.free.size:
                    block = self._take_blocks(1)[0]
                    taken.append((block, self.hash_of(block)))
                    count = min(bs, tokens - placed)
                    blocks.append(self._pop(block, count))
                    placed += count
                    if count == bs:
                        self._name(block, self._key(req, start + placed))
                self._rollback(req, cached, taken)
                return False
            self._take_fresh(req, start + placed, tokens - placed, need)
        last_fill = self.fill[blocks[-1]] if blocks else 0  # (taking blocks may grow `fill`)
        end = start + tokens
        req.kv_phase = (end - last_fill if 0 < last_fill < bs else end) % bs
        return True

    def _take_fresh(self, req: Request, at: int, rest: int, need: int) -> None:
        """Take `need` blocks from the free head for the `rest` tokens from position `at`:
        full blocks first, then the remainder, then empty ones (Q7). A full block is keyed
        only when its content ends on a block boundary (else no lookup can ever hit it), and
        each taken block's old key leaves the index as it is taken, key by key, as the
        reference does."""
        bs = self.block_size
        taken = self._take_blocks(need)
        keys, keyed, index = self.keys, self.keyed, self.index
        forget = index.pop
        keep = not self.deferred
        refcount, fill = self.refcount, self.fill
        full, remainder = divmod(rest, bs)
        full = min(full, need)
        hashes = req.hashes
        first = at // bs
        named = at % bs == 0  # else the first `full` blocks get no keys
        # the first `full` blocks, as many as the hashes reach (indexed: no zip tuples)
        count = max(0, min(full, len(hashes) - first)) if named else full
        mine = req.block_keys() if named else keys
        for k in range(count):
            block = taken[k]
            if keep:
                if keyed[block]:
                    forget(unsigned(keys[block]), None)
                if named:
                    index[hashes[first + k]] = block
            refcount[block] = 1
            fill[block] = bs
            if named:
                keys[block] = mine[first + k]
                keyed[block] = 1
            else:
                keyed[block] = 0
        for k in range(full, need):
            block = taken[k]
            if keyed[block]:
                if keep:
                    forget(unsigned(keys[block]), None)
                keyed[block] = 0
            refcount[block] = 1
            fill[block] = remainder if k == full else 0
        req.blocks.extend(taken)
        self.used += need
        self.misses += need

    def _grow(self) -> None:
        size = len(self.refcount)
        super()._grow()
        new = len(self.refcount) - size  # (super()._grow left ZEROS that long)
        self.fill = extend(self.fill, ZEROS.i32[:new])

    def _pop(self, block: int, count: int) -> int:
        """The block just taken from the free head holds `count` tokens; its old hash key
        leaves the index, whichever block that key points to now."""
        if self.keyed[block]:
            if not self.deferred:
                self.index.pop(unsigned(self.keys[block]), None)
            self.keyed[block] = 0
        self.fill[block] = count
        self.refcount[block] = 1
        self.used += 1
        self.misses += 1
        return block

    def _not_keyed(self, req: Request) -> bool:
        """Whether the request's blocks get no keys (a full prefix hit's, or hollow ones);
        both need a prefix hit, so the sets are usually empty."""
        return bool((self.outputs_only and req in self.outputs_only)
                    or (self.hollow and req in self.hollow))

    def _key(self, req: Request, end: int) -> int | None:
        """Hash key of the request's tokens up to sequence position `end`; None when no
        prefix lookup can ever produce it (it ends off a block boundary)."""
        if end % self.block_size:
            return None
        return req.hashes[end // self.block_size - 1]

    def _top_up_full(self, req: Request, block: int, end: int) -> None:
        """A top-up filled the request's last block, up to sequence position `end`: the
        reference hashes the tokens of all the request's blocks. That is the prefix's key
        unless the blocks' content does not start at the prompt (a full prefix hit's) or
        lacks tokens (hollow); such a key is never looked up, so it is left out."""
        bs = self.block_size
        self.fill[block] = bs
        if end % bs or self._not_keyed(req):
            self.keyed[block] = 0
            return
        i = end // bs - 1
        keys = req.keys  # made, or empty (`Request.keys`): no read of `hashes` here
        if not keys:
            keys = req.block_keys()
        self.keys[block] = keys[i]
        self.keyed[block] = 1
        if not self.deferred:
            self.index[req.hashes[i]] = block

    def _name(self, block: int, key: int | None) -> None:
        if key is None:
            self.keyed[block] = 0
            return
        self.set_hash(block, key)
        if not self.deferred:
            self.index[key] = block

    def _rollback(self, req: Request, cached: list[int],
                  taken: list[tuple[int, int | None]]) -> None:
        """Undo a failed admission, in the reference's order: taken blocks last to first
        (drop the key they got, restore the one they had), then the cached ones."""
        for block, old in reversed(taken):
            key = self.hash_of(block)
            if key is not None and not self.deferred:
                self.index.pop(key, None)
            self._name(block, old)
            self.refcount[block] = 0
            self.fill[block] = 0  # the reference drops the tokens but restores the hash
            self.used -= 1
            self.misses -= 1
            self.free.push(block)
        refcount = self.refcount
        for block in cached:
            refcount[block] -= 1
            self.hits -= 1
            if refcount[block] == 0:
                self.used -= 1
                self.free.push(block)
        req.blocks = []
