"""KV cache: allocation, prefix hits, LRU reuse of freed blocks, conservation."""

from __future__ import annotations

import numpy as np

from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.reference import ReferenceKVCache


def request(index: int, tokens: list[int], output: int = 0, block_size: int = 4) -> Request:
    req = Request(index, 0, np.array(tokens), np.arange(output))
    req.hash_blocks(block_size)
    return req


def test_allocation_takes_ceil_blocks_and_conserves():
    kv = KVCache(10, 4)
    req = request(0, list(range(10)))
    assert kv.allocate(req, 0, 10)
    assert len(req.blocks) == 3 and kv.used == 3 and kv.free_blocks == 7
    kv.check()


def test_allocation_fails_without_side_effects_when_too_big():
    kv = KVCache(2, 4)
    req = request(0, list(range(12)))
    assert not kv.allocate(req, 0, 12)
    assert req.blocks == [] and kv.used == 0 and kv.misses == 0
    kv.check()


def test_chunks_fill_the_partial_block_first_no_empty_blocks():
    """Two chunks of 5 tokens with 4-token blocks: 10 tokens in 3 blocks (the reference's
    allocator would hold 4, one of them empty: quirk Q7)."""
    kv = KVCache(10, 4)
    req = request(0, list(range(10)))
    kv.allocate(req, 0, 5)
    kv.allocate(req, 5, 5)
    assert len(req.blocks) == 3 and kv.used == 3


def test_full_blocks_are_published_and_a_shared_prefix_hits():
    kv = KVCache(10, 4)
    first = request(0, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    kv.allocate(first, 0, 9)
    second = request(1, [1, 2, 3, 4, 5, 6, 7, 8, 42, 43])
    cached = kv.lookup(second, second.input_len)
    assert cached.blocks == first.blocks[:2] and cached.load_us == 0
    kv.attach(second, cached.blocks)
    assert kv.hits == 2 and kv.refcount[cached.blocks[0]] == 2 and kv.used == 3


def test_prefix_lookup_stops_at_first_difference():
    kv = KVCache(10, 4)
    first = request(0, [1, 2, 3, 4, 5, 6, 7, 8])
    kv.allocate(first, 0, 8)
    other = request(1, [9, 2, 3, 4, 5, 6, 7, 8])
    assert kv.lookup(other, 8).blocks == []


def test_released_blocks_keep_content_and_revive_on_hit():
    kv = KVCache(4, 4)
    first = request(0, [1, 2, 3, 4, 5, 6, 7, 8])
    kv.allocate(first, 0, 8)
    kv.release(first)
    assert kv.used == 0
    again = request(1, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    cached = kv.lookup(again, 9)
    assert len(cached.blocks) == 2
    kv.attach(again, cached.blocks)
    assert kv.used == 2 and kv.free_blocks == 2
    kv.check()


def test_lru_evicts_least_recently_freed_and_request_tail_first():
    """Release appends blocks last-to-first, so a request's tail is evicted before its head,
    and an older request's blocks before a newer one's."""
    kv = KVCache(4, 4)
    old = request(0, [1, 2, 3, 4, 5, 6, 7, 8])
    new = request(1, [11, 12, 13, 14, 15, 16, 17, 18])
    kv.allocate(old, 0, 8)
    kv.allocate(new, 0, 8)
    kv.release(old)
    kv.release(new)
    filler = request(2, [99, 98, 97, 96])
    kv.allocate(filler, 0, 4)  # evicts old's tail block
    assert len(kv.lookup(request(3, [1, 2, 3, 4, 5, 6, 7, 8]), 8).blocks) == 1
    assert len(kv.lookup(request(4, [11, 12, 13, 14, 15, 16, 17, 18]), 8).blocks) == 2


def test_can_admit_counts_cached_blocks_that_must_leave_the_free_list():
    kv = KVCache(3, 4)
    first = request(0, [1, 2, 3, 4, 5, 6, 7, 8])
    kv.allocate(first, 0, 8)
    kv.release(first)
    second = request(1, [1, 2, 3, 4, 5, 6, 7, 8, *range(20, 28)])
    cached = kv.lookup(second, 16)
    assert len(cached.blocks) == 2
    assert kv.can_admit(cached.blocks, 8, 4)  # 2 revived + 1 new = 3 blocks
    assert not kv.can_admit(cached.blocks, 8, 8)  # 2 revived + 2 new > 3


def test_decode_tokens_publish_blocks_that_include_output():
    """A block filled partly by generated tokens is hashed over prompt + output, so a later
    request whose prompt continues the conversation hits it (multi-turn reuse)."""
    kv = KVCache(10, 4)
    first = request(0, [1, 2, 3, 4, 5, 6], output=4)  # sequence 1..6, then output ids 0..3
    kv.allocate(first, 0, 6)
    kv.allocate(first, 6, 1)
    kv.allocate(first, 7, 1)  # block 1 is now full: tokens 5, 6, out0, out1
    follow_up = request(1, [1, 2, 3, 4, 5, 6, 0, 1, 77])
    assert len(kv.lookup(follow_up, 9).blocks) == 2


def test_evicting_a_block_keeps_another_blocks_registration_of_the_same_hash():
    """When two blocks carry one hash and the older is evicted, the newer stays findable
    (the reference deletes the hash key even when it points to the other block)."""
    kv = KVCache(3, 4)
    first = request(0, [1, 2, 3, 4])
    kv.allocate(first, 0, 4)
    kv.release(first)  # block 0 cached, free
    second = request(1, [1, 2, 3, 4])
    kv.allocate(second, 0, 4)  # a fresh block with the same hash: registration moves to it
    assert second.blocks == [1]
    filler = request(2, [7, 7, 7, 7, 8, 8, 8, 8])
    kv.allocate(filler, 0, 8)  # pops block 2 then block 0, evicting block 0's old hash
    assert 0 in filler.blocks
    assert kv.lookup(request(3, [1, 2, 3, 4]), 4).blocks == [1]


# -- ReferenceKVCache: the reference's accounting, for compat mode (spec engine.md §4) ---------


def test_reference_eviction_deletes_the_hash_key_even_from_the_newer_block():
    """The scenario above, the reference's way: evicting block 0 deletes the key, which
    pointed to block 1, so the prefix no longer hits."""
    kv = ReferenceKVCache(3, 4)
    first = request(0, [1, 2, 3, 4])
    kv.allocate(first, 0, 4)
    kv.release(first)
    second = request(1, [1, 2, 3, 4])
    kv.allocate(second, 0, 4)
    assert second.blocks == [1] and kv.lookup(request(3, [1, 2, 3, 4]), 4).blocks == [1]
    filler = request(2, [7, 7, 7, 7, 8, 8, 8, 8])
    kv.allocate(filler, 0, 8)
    assert 0 in filler.blocks
    assert kv.lookup(request(3, [1, 2, 3, 4]), 4).blocks == []
    kv.check()


def test_reference_chunk_takes_ceil_blocks_after_topping_up_so_blocks_shift():
    """Chunks of 5 + 5 tokens in 4-token blocks: [4, 1], then the top-up [4, 4] and two more
    blocks for the 5 tokens, [2] and [0] (Q7): 4 blocks, 4 misses. Decode blocks then open
    at positions 10, 14, ...: the block holding 10..13 is full but its content ends at 14,
    off a block boundary, so its hash can never hit and is not registered."""
    kv = ReferenceKVCache(10, 4)
    req = request(0, list(range(1, 11)), output=6)
    assert kv.allocate(req, 0, 5)
    assert len(req.blocks) == 2
    assert kv.allocate(req, 5, 5)
    assert len(req.blocks) == 4 and kv.used == 4 and kv.misses == 4
    assert [kv.fill[b] for b in req.blocks] == [4, 4, 2, 0]
    assert len(kv.lookup(request(1, list(range(1, 11))), 10).blocks) == 2  # blocks 0..7
    assert req.kv_phase == 2
    for position in range(10, 14):
        assert kv.allocate(req, position, 1)
    assert len(req.blocks) == 5 and kv.misses == 5
    assert kv.hash_of(req.blocks[-1]) is None
    kv.check()


def test_reference_full_prefix_hit_takes_no_references_and_counts_no_hits():
    """Q8: the cached blocks stay free (evictable); the first decode token takes a block."""
    kv = ReferenceKVCache(4, 4)
    first = request(0, [1, 2, 3, 4, 5, 6, 7, 8])
    kv.allocate(first, 0, 8)
    kv.release(first)
    second = request(1, [1, 2, 3, 4, 5, 6, 7, 8], output=2)
    cached = kv.lookup(second, 8)
    assert len(cached.blocks) == 2
    assert kv.admit(second, cached, 8, 0)
    assert second.blocks == [] and kv.hits == 0 and kv.used == 0 and kv.free_blocks == 4
    assert kv.allocate(second, 8, 1)
    assert len(second.blocks) == 1 and second.blocks[0] not in cached.blocks
    kv.check()


def test_reference_admission_rolls_back_when_revived_blocks_exhaust_the_free_list():
    """The check counts only new blocks (2 <= 3 free); reviving the 2 cached blocks leaves 1,
    so the second new block is missing: everything is undone, the taken block gets its old
    hash back, and the taken and revived blocks return to the free list's tail (revived ones
    in prefix order), which changes what is evicted next."""
    kv = ReferenceKVCache(5, 4)
    other = request(5, [60, 61, 62, 63])
    kv.allocate(other, 0, 4)  # block 0
    kv.release(other)
    first = request(0, [1, 2, 3, 4, 5, 6, 7, 8])
    kv.allocate(first, 0, 8)  # blocks 1, 2
    kv.release(first)
    hold = request(9, list(range(50, 58)))
    kv.allocate(hold, 0, 8)  # blocks 3, 4
    assert list(kv.free) == [0, 2, 1]
    second = request(1, [1, 2, 3, 4, 5, 6, 7, 8, *range(20, 28)])
    cached = kv.lookup(second, 16)
    assert cached.blocks == [1, 2]
    hits, misses = kv.hits, kv.misses
    assert not kv.admit(second, cached, 8, 8)
    assert second.blocks == [] and kv.used == 2 and (kv.hits, kv.misses) == (hits, misses)
    assert list(kv.free) == [0, 1, 2]
    assert kv.lookup(request(6, [60, 61, 62, 63]), 4).blocks == [0]
    assert kv.lookup(request(7, [1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23]), 12).blocks == [1, 2]
    kv.check()


def test_reference_completion_allocates_one_more_token_or_counts_a_failure():
    kv = ReferenceKVCache(3, 4)
    req = request(0, [1, 2, 3, 4], output=1)
    kv.allocate(req, 0, 4)
    req.progress = 4  # the first (only) token was produced by the prefill
    kv.complete(req)  # position 4 opens a block: one more miss, then both are released
    assert kv.misses == 2 and kv.used == 0 and kv.failures == 0
    full = ReferenceKVCache(1, 4)
    req = request(1, [1, 2, 3, 4], output=1)
    full.allocate(req, 0, 4)
    req.progress = 4
    full.complete(req)
    assert full.failures == 1 and full.used == 0
    full.check()


def test_vectorised_hashing_equals_one_request_at_a_time():
    from blis_simpy.core.hashing import block_hashes
    from blis_simpy.workload.prehash import hash_requests

    rng = np.random.default_rng(3)
    reqs = [Request(i, 0, rng.integers(0, 128_000, n), rng.integers(0, 9, m))
            for i, (n, m) in enumerate([(0, 3), (5, 0), (37, 20), (64, 0), (15, 1), (200, 77)])]
    expected = [block_hashes(np.concatenate((r.tokens,)), 16) for r in reqs]
    hash_requests(reqs, 16)
    assert [r.hashes for r in reqs] == expected
    assert all(r.tokens is None for r in reqs)


def test_e4_eviction_ties_take_the_tail_not_the_lowest_block_id():
    """Seed E.4 breaks eviction ties by the lowest block id. Natively, blocks freed at one
    instant leave tail first (vLLM's order), which keeps a cached prefix's head reachable;
    the literal rule evicts the head first, leaving the rest of the chain unreachable
    (measured on prefix-heavy: TTFT p99 403 -> 558 ms, preemptions 66 -> 82). Not followed,
    on purpose: docs/differences-from-blis.md, "eviction ties"."""
    kv = KVCache(3, 4)
    old = request(0, list(range(12)))
    kv.allocate(old, 0, 12)
    blocks = list(old.blocks)
    assert blocks == sorted(blocks)  # the prefix's head has the lowest block id
    kv.release(old)  # all three freed at one instant: a tie
    filler = request(1, [100, 101, 102, 103])
    kv.allocate(filler, 0, 4)  # takes one of the tied blocks
    assert filler.blocks == [blocks[-1]] != [blocks[0]]
    again = request(2, list(range(12)))
    assert len(kv.lookup(again, 12).blocks) == 2  # the head and the next block still hit
    kv.check()
