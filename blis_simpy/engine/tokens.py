"""Prefix-cache block hashes as a chain: block i's hash covers block i-1's hash and its tokens.

The reference re-hashes the whole prefix (SHA-256 of every token id from 0) for every block;
equal chains mean equal prefixes here too, so hits and misses are the same, but the cost is
linear in the sequence length. Each token id is mixed with its position (splitmix64 on 64-bit
words, numpy wraparound arithmetic), a block's words are summed, and the running sum is the
chain: hash_i = hash_{i-1} + sum(block i). Distinct prefixes collide with probability ~2^-64.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a bijection on 64-bit words with full avalanche."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def block_hashes(tokens: np.ndarray, block_size: int) -> list[int]:
    """Hash of every full block of `tokens`, each covering all tokens before it."""
    full = len(tokens) // block_size
    if full == 0:
        return []
    n = full * block_size
    with np.errstate(over="ignore"):
        ids = tokens[:n].astype(np.uint64)
        positions = np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN
        words = _mix(_mix(ids + positions) ^ positions)
        chain = np.cumsum(words.reshape(full, block_size).sum(axis=1, dtype=np.uint64),
                          dtype=np.uint64)
    return chain.tolist()
