"""KV cache: allocation, prefix hits, LRU reuse of freed blocks, conservation."""

from __future__ import annotations

import numpy as np

from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import KVCache


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
    kv.attach(second, cached)
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
    kv.attach(again, cached)
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
    assert kv.can_admit(cached, 8, 4)  # 2 revived + 1 new = 3 blocks
    assert not kv.can_admit(cached, 8, 8)  # 2 revived + 2 new > 3


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


def test_vectorised_hashing_equals_one_request_at_a_time():
    from blis_simpy.core.hashing import block_hashes, hash_requests

    rng = np.random.default_rng(3)
    reqs = [Request(i, 0, rng.integers(0, 128_000, n), rng.integers(0, 9, m))
            for i, (n, m) in enumerate([(0, 3), (5, 0), (37, 20), (64, 0), (15, 1), (200, 77)])]
    expected = [block_hashes(np.concatenate((r.tokens,)), 16) for r in reqs]
    hash_requests(reqs, 16)
    assert [r.hashes for r in reqs] == expected
    assert all(r.tokens is None for r in reqs)
