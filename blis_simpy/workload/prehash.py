"""Block hashes computed by a request source before delivery: one request continuing a known
chain (a session's next turn), or many at once in one vectorised pass (the same hashes as
`Request.hash_blocks`, core/hashing.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blis_simpy.core.hashing import block_hashes, chain_sums, mix64, scrambled_positions
from blis_simpy.core.request import Request


def hash_request(req: Request, block_size: int, known: Sequence[int] = ()) -> list[int]:
    """`Request.hash_blocks` done by its source before delivery, continuing from the hashes of
    its first blocks if `known`; returns the chain (a later request that extends this one's
    sequence continues from it)."""
    if req.tokens is not None and not req.hashed:
        req.hashes = block_hashes(req.tokens, block_size, known)
        req.tokens, req.hashed = None, True
    return req.hashes


# Words mixed at a time by hash_requests: 512 KiB of words and scratch stay in the CPU's cache
# across mix64's passes (a whole chunk's 2 MiB arrays went through memory at every pass; the
# hashing of the 10K bench's prompts took 0.090 s that way, 0.076 s in slices).
CACHE_WORDS = 1 << 15


class Scratch:
    """hash_requests' work space, owned by one caller and reused across its chunks: a chunk's
    fresh 2 MiB arrays cost more in page faults than the hashing in them."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint64)

    def words(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Two uint64 work arrays of `count` words each, valid until the next call (the
        buffer grows with a quarter to spare: chunks differ by a few requests)."""
        if len(self.buffer) < 2 * count:
            self.buffer = np.empty(2 * count + count // 2, dtype=np.uint64)
        return self.buffer[:count], self.buffer[count : 2 * count]


def hash_requests(requests: Sequence[Request], block_size: int,
                  scratch: Scratch | None = None) -> None:
    """`Request.hash_blocks` for many requests in one vectorised pass (same hashes): blocks of
    different requests never straddle, so one running sum covers them all, and each request's
    chain is that sum since its first block."""
    todo = [r for r in requests if not r.hashed and r.tokens is not None]
    if not todo:
        return
    tokens = [r.tokens for r in todo if r.tokens is not None]
    fulls = [len(t) // block_size for t in tokens]
    lengths = [n * block_size for n in fulls]
    if not any(lengths):
        for req in todo:
            req.hashes, req.tokens, req.hashed = [], None, True
        return
    positions = scrambled_positions(max(lengths))
    words, spare = (scratch or Scratch()).words(sum(lengths))
    with np.errstate(over="ignore"):
        np.concatenate([positions[:n] for n in lengths], out=words)
        ids = spare.view(np.int64)  # the token ids' int64 bit patterns, as `as_words` takes them
        np.concatenate([t[:n] for t, n in zip(tokens, lengths, strict=True)], out=ids,
                       casting="unsafe")
        for lo in range(0, len(words), CACHE_WORDS):
            part, work = words[lo : lo + CACHE_WORDS], spare[lo : lo + CACHE_WORDS]
            part ^= work
            mix64(part, work)
        running = chain_sums(words, block_size)
        first_block = np.cumsum(fulls) - fulls
        before = np.where(first_block > 0, running[np.maximum(first_block - 1, 0)],
                          np.uint64(0))
        chains = (running - np.repeat(before, fulls)).tolist()
    for req, lo, n in zip(todo, first_block.tolist(), fulls, strict=True):
        req.hashes = chains[lo: lo + n]
        req.tokens = None
        req.hashed = True
