"""Block-hash chains: continuing from known hashes gives the chain hashed from scratch, and
the one-request-at-a-time and vectorised paths agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.hashing import block_hashes, block_keys
from blis_simpy.core.request import Request
from blis_simpy.workload.prehash import hash_request, hash_requests

token_lists = st.lists(st.integers(0, 127_999), max_size=200)


@settings(max_examples=300, deadline=None)
@given(token_lists, st.integers(1, 16), st.integers(0, 220))
def test_continuing_from_known_hashes_equals_hashing_from_scratch(
        ids: list[int], block: int, cut: int) -> None:
    tokens = np.array(ids, dtype=np.int64)
    known = block_hashes(tokens[:cut], block)  # hashes of a sequence the tokens start with
    assert block_hashes(tokens, block, known) == block_hashes(tokens, block)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(token_lists, token_lists), max_size=6), st.integers(1, 16))
def test_hash_request_equals_the_vectorised_pass(pairs: list[tuple[list[int], list[int]]],
                                                 block: int) -> None:
    def make() -> list[Request]:
        return [Request(i, 0, np.array(a, dtype=np.int64), np.array(b, dtype=np.int64))
                for i, (a, b) in enumerate(pairs)]

    one, many = make(), make()
    for req in one:
        hash_request(req, block)
    hash_requests(many, block)
    for a, b in zip(one, many, strict=True):
        assert a.hashes == b.hashes and a.hashed and a.tokens is None


def test_hash_values_are_pinned() -> None:
    """The hash values themselves (any int dtype of token ids), as the first version made them:
    faster arithmetic must not change them."""
    ids = np.array([7, 127999, 0, 5] * 10, dtype=np.int64)
    assert block_hashes(ids, 8) == [14835165632749611527, 2163514148668446572,
                                    14909644425002849180, 6500444836506182198,
                                    18045263892353993537]
    assert block_hashes(np.arange(0, 48, dtype=np.int32), 16) == [
        12244052726516627542, 3229044313069531283, 17543082615597613097]
    req = Request(0, 0, np.arange(0, 40, dtype=np.int32), np.arange(40, 48, dtype=np.int32))
    hash_requests([req], 16)
    assert req.hashes == [12244052726516627542, 3229044313069531283, 17543082615597613097]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(token_lists, max_size=3), max_size=6), st.integers(1, 16))
def test_hashing_a_sequence_in_parts_equals_hashing_it_whole(
        parts: list[list[list[int]]], block: int) -> None:
    from blis_simpy.workload.prehash import hash_parts

    whole = [Request(i, 0, np.array([t for p in ps for t in p], dtype=np.int64),
                     np.zeros(0, dtype=np.int64)) for i, ps in enumerate(parts)]
    hash_requests(whole, block)
    pieces = [Request(i, 0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
              for i in range(len(parts))]
    hash_parts(pieces, [[np.array(p, dtype=np.int64) for p in ps] for ps in parts], block)
    assert [r.hashes for r in pieces] == [r.hashes for r in whole]
    assert all(r.hashed and r.tokens is None for r in pieces)
    # the KV cache's keys, made in bulk, are the hashes' bit patterns
    assert [list(r.keys) for r in pieces] == [list(block_keys(r.hashes)) for r in pieces]


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_block_keys_are_the_hashes_int64_bit_patterns(hashes: list[int]) -> None:
    from blis_simpy.engine.kv.cache import signed, unsigned

    keys = block_keys(hashes)
    assert list(keys) == [h - 2**64 if h >= 2**63 else h for h in hashes]
    assert [unsigned(k) for k in keys] == hashes and [signed(h) for h in hashes] == list(keys)
    req = Request(0, 0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    req.hashes = hashes
    assert list(req.block_keys()) == list(keys)  # made from the hashes when first needed
