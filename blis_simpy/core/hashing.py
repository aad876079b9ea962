"""Prefix-cache block hashes as a chain: block i's hash covers block i-1's hash and its tokens.

The reference re-hashes the whole prefix (SHA-256 of every token id from 0) for every block;
equal chains mean equal prefixes here too, so hits and misses are the same, but the cost is
linear in the sequence length. Each token id is mixed with its position (splitmix64 on 64-bit
words, numpy wraparound arithmetic), a block's words are summed, and the running sum is the
chain: hash_i = hash_{i-1} + sum(block i). Distinct prefixes collide with probability ~2^-64.

The chain is summed a block at a time (each block's words summed, then a running sum over the
blocks, not over every token: numpy's running sum of 64-bit words is several times slower per
element than a sum), and positions are mixed from a table of `position x golden` kept for the
longest sequence hashed so far; wraparound addition makes the values the same whichever way
they are summed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from librt.vecs import vec
from mypy_extensions import i64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


_positions = np.empty(0, dtype=np.uint64)  # `position x golden` for positions 1, 2, ...


def scrambled_positions(count: int) -> np.ndarray:
    """`position x golden` (mod 2^64) for positions 1..count at least: a read-only table,
    grown (doubled) when a longer sequence comes, so a run computes it a few times in all."""
    global _positions
    if len(_positions) < count:
        with np.errstate(over="ignore"):
            table = np.arange(1, max(count, 2 * len(_positions), 4096) + 1, dtype=np.uint64)
            table *= _GOLDEN
        table.flags.writeable = False
        _positions = table
    return _positions


def chain_sums(words: np.ndarray, block_size: int) -> np.ndarray:
    """Running sum (mod 2^64) of `words` at the end of each block: `words` holds whole
    blocks; each block is summed (`reduceat` at the block starts: 2.5x faster than a row sum
    of the blocks x block_size matrix, whose rows are short), then the block sums are.
    Overwrites nothing."""
    sums = np.add.reduceat(words, np.arange(0, len(words), block_size))
    return sums.cumsum(out=sums)  # the method: `np.cumsum` adds two Python-level wrappers


def mix64(x: np.ndarray, spare: np.ndarray | None = None) -> np.ndarray:
    """splitmix64 finaliser: a bijection on 64-bit words with full avalanche. Overwrites `x`
    (in-place steps: the hash of a long prompt is memory-bound) and returns it; `spare`, a
    uint64 array of the same shape, is overwritten as the scratch space if given."""
    shifted = np.right_shift(x, np.uint64(30), out=spare)
    x ^= shifted
    x *= _M1
    np.right_shift(x, np.uint64(27), out=shifted)
    x ^= shifted
    x *= _M2
    np.right_shift(x, np.uint64(31), out=shifted)
    x ^= shifted
    return x


def as_words(ids: np.ndarray) -> np.ndarray:
    """Token ids as 64-bit words (their int64 bit patterns), without a copy when they are
    int64 already."""
    return np.asarray(ids, dtype=np.int64).view(np.uint64)


def block_hashes(tokens: np.ndarray, block_size: int, known: Sequence[int] = ()) -> list[int]:
    """Hash of every full block of `tokens`, each covering all tokens before it. `known`: the
    hashes of its first blocks when the caller has them (a shared system prompt, the previous
    turn of a conversation), so only the blocks after them are hashed: the chain is a running
    sum, so it continues from the last known hash."""
    full = len(tokens) // block_size
    done = min(len(known), full)
    if full == done:
        return list(known[:full])
    start, n = done * block_size, full * block_size
    # Whole-array operations only: numpy wraps them around silently (a scalar operation would
    # warn on overflow), so no `np.errstate` is needed (entering one costs ~2 µs a request).
    words = scrambled_positions(n)[start:n] ^ as_words(tokens[start:n])
    mix64(words)
    if done:
        words[:1] += np.uint64(known[done - 1])
    chain = chain_sums(words, block_size)
    return [*known[:done], *chain.tolist()]


def keys_of(chain: np.ndarray) -> vec[i64]:
    """Block hashes (uint64) as their int64 bit patterns, in a native vector (the KV cache's
    keys for them: `Request.keys`)."""
    return vec[i64](chain.view(np.int64))


def block_keys(hashes: Sequence[int]) -> vec[i64]:
    """`keys_of` for hashes that are ints already."""
    return keys_of(np.array(hashes, dtype=np.uint64))
