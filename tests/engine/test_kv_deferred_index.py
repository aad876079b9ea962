"""The deferred prefix index (engine/kv/cache.py): a pool that does not keep its hash index
until a hit is possible answers every call exactly as a pool that keeps it from the start.

The differential test drives two pools of one kind, deferred and not, through the same random
life of a set of requests (admissions with their prefix lookups, prefill chunks, decode tokens,
preemptions, completions), on twin request objects, and compares every answer and the whole
accounting after each operation; at the end the deferred pool builds its index, which must be
the eager pool's. Requests share prefixes (and repeat one another whole) at random, so some
runs build the index early, some late and some never.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.reference import ReferenceKVCache

BLOCK = 4
POOLS = [KVCache, ReferenceKVCache]


def twins(prompts: list[list[int]], outputs: list[int]) -> tuple[list[Request], list[Request]]:
    def make() -> list[Request]:
        made = []
        for i, (prompt, out) in enumerate(zip(prompts, outputs, strict=True)):
            req = Request(i, 0, np.array(prompt), np.arange(100, 100 + out))
            req.hash_blocks(BLOCK)
            made.append(req)
        return made
    return make(), make()


def accounting(kv: KVCache) -> tuple:
    return (kv.used, kv.hits, kv.misses, kv.failures, len(kv.free),
            [kv.hash_of(b) for b in range(len(kv.keyed))], list(kv.refcount))


class Life:
    """One request's state as the instance would keep it."""

    def __init__(self, req: Request) -> None:
        self.req = req
        self.holding = False
        self.done = False


def act(kv: KVCache, life: Life, op: int, size: int) -> object:
    """Apply one operation the way the instance does; returns what the pool answered."""
    req = life.req
    if life.done:
        return None
    if not life.holding:
        hit = kv.lookup(req, req.prefill_target)
        start = len(hit.blocks) * BLOCK
        tokens = min(max(req.prefill_target - start, 0), size)
        ok = kv.admit(req, hit, start, tokens)
        if ok:
            life.holding = True
            req.progress = start + tokens
        return ("admit", list(hit.blocks), ok)
    if op == 0:  # preempted: back to waiting, recomputed from the start
        kv.release(req)
        life.holding, req.progress = False, 0
        return "released"
    if op == 1 or req.progress >= req.input_len + req.output_len - 1:
        kv.complete(req)
        life.holding, life.done = False, True
        return "completed"
    if req.progress < req.prefill_target:  # the next prefill chunk
        tokens = min(size, req.prefill_target - req.progress)
        ok = kv.allocate(req, req.progress, tokens)
    else:  # one decode token
        ok = kv.allocate(req, req.progress, 1)
        tokens = 1
    if ok:
        req.progress += tokens
    return ("allocate", ok)


# Each prompt is one of a few shared beginnings (whole blocks, so they can hit) and its own end.
starts = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=3).map(
    lambda blocks: [t for b in blocks for t in (b, b, b, b)]), min_size=1, max_size=3)
prompts = st.tuples(starts, st.lists(st.tuples(st.integers(0, 2),
                                               st.lists(st.integers(0, 9), max_size=6)),
                                     min_size=1, max_size=6)).map(
    lambda made: [made[0][k % len(made[0])] + end for k, end in made[1]])


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.__name__)
@settings(max_examples=200, deadline=None)
@given(total=st.integers(3, 24), prompts=prompts,
       outputs=st.lists(st.integers(0, 9), min_size=6, max_size=6),
       ops=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(1, 9)),
                    max_size=60))
def test_deferred_index_answers_as_the_kept_index(pool, total, prompts, outputs, ops):
    deferred, kept = pool(total, BLOCK), pool(total, BLOCK, defer_index=False)
    mine, theirs = twins(prompts, outputs[: len(prompts)])
    lives = [Life(r) for r in mine], [Life(r) for r in theirs]
    for who, op, size in ops:
        i = who % len(prompts)
        assert act(deferred, lives[0][i], op, size) == act(kept, lives[1][i], op, size)
        assert mine[i].blocks == theirs[i].blocks and mine[i].kv_phase == theirs[i].kv_phase
        assert accounting(deferred) == accounting(kept)
        deferred.check()
    deferred.keep_index()
    assert deferred.index == kept.index


def test_disjoint_requests_never_build_the_index():
    """Different first blocks, no preemption: nothing can hit, the index is never kept."""
    kv = KVCache(64, BLOCK)
    for i in range(5):
        req = Request(i, 0, np.arange(10 * i, 10 * i + 9), np.arange(3))
        req.hash_blocks(BLOCK)
        assert kv.lookup(req, 9).blocks == []
        assert kv.admit(req, kv.lookup(req, 9), 0, 9)
        kv.complete(req)
    assert kv.deferred and not kv.index


def test_first_hashes_are_bounded_by_the_blocks_not_the_requests():
    """A long run without shared prefixes keeps one first hash per block still holding it
    (a reused block's hash leaves), not one per request ever admitted (issue 36: a
    10-million-request run held ~70 bytes a request here)."""
    kv = KVCache(64, BLOCK)
    for i in range(3000):
        req = Request(i, 0, np.arange(10 * i, 10 * i + 9), np.arange(3))
        req.hash_blocks(BLOCK)
        assert kv.admit(req, kv.lookup(req, 9), 0, 9)
        kv.complete(req)
        assert len(kv.first_hashes) <= kv.total
    assert kv.deferred


def test_a_shared_first_block_or_a_readmission_builds_the_index():
    for readmit in (False, True):
        kv = ReferenceKVCache(64, BLOCK)
        first = Request(0, 0, np.arange(9), np.arange(3))
        other = Request(1, 0, np.arange(9) if not readmit else np.arange(50, 59), np.arange(3))
        for req in (first, other):
            req.hash_blocks(BLOCK)
        assert kv.admit(first, kv.lookup(first, 9), 0, 9)
        kv.release(first)  # preempted: its blocks stay cached
        again = first if readmit else other
        hit = kv.lookup(again, 9)
        assert not kv.deferred and hit.blocks  # the index is kept, and the prefix hits
