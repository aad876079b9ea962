"""What a router reading an instance's real cache is told (issue 35 item 3): `cached_prefix`
counts the blocks a lookup would find, on deferred and kept indexes, whatever the pool's life,
and `cached_hashes` is the set those counts are made of."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.test_kv_deferred_index import BLOCK, POOLS, Life, act, prompts, twins


def answers(kv, reqs):
    return [kv.cached_prefix(r.hashes[: r.input_len // BLOCK]) for r in reqs]


def looked_up(kv, reqs):
    return [len(kv.lookup(r, r.input_len).blocks) for r in reqs]


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.__name__)
@settings(max_examples=150, deadline=None)
@given(total=st.integers(3, 24), prompts=prompts,
       outputs=st.lists(st.integers(0, 9), min_size=6, max_size=6),
       ops=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(1, 9)),
                    max_size=60))
def test_cached_prefix_is_what_a_lookup_finds(pool, total, prompts, outputs, ops):
    deferred, kept = pool(total, BLOCK), pool(total, BLOCK, defer_index=False)
    mine, theirs = twins(prompts, outputs[: len(prompts)])
    lives = [Life(r) for r in mine], [Life(r) for r in theirs]
    for who, op, size in ops:
        i = who % len(prompts)
        act(deferred, lives[0][i], op, size)
        act(kept, lives[1][i], op, size)
        holders = [r for r, life in zip(theirs, lives[1], strict=True) if not life.done]
        expected = looked_up(kept, holders)  # a lookup on a kept index changes nothing
        assert answers(kept, holders) == expected
        assert answers(deferred, [mine[r.index] for r in holders]) == expected
        assert deferred.cached_hashes() == kept.cached_hashes()
        deferred.check()


def test_cached_prefix_counts_without_counting_a_hit():
    from blis_simpy.engine.kv.cache import KVCache

    kv = KVCache(16, BLOCK, defer_index=False)
    (req,), _ = twins([[1, 2, 3, 4, 5, 6, 7, 8, 9]], [2])
    assert kv.admit(req, kv.lookup(req, 9), 0, 9)
    hashes = req.hashes[:2]
    hits = kv.hits
    assert kv.cached_prefix(hashes) == 2
    assert kv.cached_prefix([]) == 0
    assert kv.hits == hits
    assert kv.cached_hashes() == set(hashes)
