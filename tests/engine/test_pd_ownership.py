"""The single-ownership check of P/D KV (`check_ownership`) catches what it is for: a request
holding blocks on two instances, a block referenced by no holder (a leak) and a holder whose
block is not referenced (freed twice)."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.core.errors import InvariantError
from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.checked import check_ownership


class Owner:
    def __init__(self, name: str, holders: list[Request]) -> None:
        self.id = name
        self.kv = KVCache(64, 16)
        self.holders = holders

    def kv_holders(self) -> list[Request]:
        return self.holders


def request(index: int, tokens: int = 40) -> Request:
    req = Request(index, 0, np.arange(tokens), np.arange(4))
    req.hash_blocks(16)
    return req


def test_consistent_owners_pass():
    a, b = request(0), request(1)
    p, d = Owner("p", [a]), Owner("d", [b])
    assert p.kv.allocate(a, 0, 40) and d.kv.allocate(b, 0, 40)
    check_ownership([p, d])


def test_a_request_holding_blocks_on_two_instances_fails():
    a = request(0)
    p, d = Owner("p", [a]), Owner("d", [a])
    assert p.kv.allocate(a, 0, 40)
    with pytest.raises(InvariantError, match="both p and d"):
        check_ownership([p, d])


def test_a_leaked_block_fails():
    a = request(0)
    p = Owner("p", [])
    assert p.kv.allocate(a, 0, 40)  # referenced by a request the instance no longer holds
    with pytest.raises(InvariantError, match="differ"):
        check_ownership([p])


def test_a_block_freed_under_its_holder_fails():
    a = request(0)
    p = Owner("p", [a])
    assert p.kv.allocate(a, 0, 40)
    blocks = list(a.blocks)
    p.kv.release(a)
    a.blocks = blocks  # still thinks it holds them
    with pytest.raises(InvariantError, match="differ"):
        check_ownership([p])
