"""Block hashes computed by a request source before delivery: one request continuing a known
chain (a session's next turn), or many at once in one vectorised pass (the same hashes as
`Request.hash_blocks`, core/hashing.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blis_simpy.core.hashing import block_hashes, chain_sums, keys_of, mix64, scrambled_positions
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
    """`Request.hash_blocks` for many requests in one vectorised pass (same hashes)."""
    todo = [r for r in requests if not r.hashed and r.tokens is not None]
    hash_parts(todo, [(r.tokens,) for r in todo if r.tokens is not None], block_size, scratch)


def hash_parts(requests: Sequence[Request], parts: Sequence[Sequence[np.ndarray]],
               block_size: int, scratch: Scratch | None = None) -> None:
    """Hash each request's token ids, given as the arrays they are made of, in order
    (`parts[i]` for `requests[i]`): its whole sequence's block hashes, as `Request.hash_blocks`
    computes them; its token ids are dropped."""
    if not requests:
        return
    chains, fulls = chain_arrays(parts, block_size, scratch)
    hashes = chains.tolist()
    keys = keys_of(chains)
    lo = 0
    for req, n in zip(requests, fulls, strict=True):
        req.hashes = hashes[lo: lo + n]
        req.keys = keys[lo: lo + n]
        req.tokens = None
        req.hashed = True
        lo += n


def chain_arrays(parts: Sequence[Sequence[np.ndarray]], block_size: int,
                 scratch: Scratch | None = None) -> tuple[np.ndarray, list[int]]:
    """The block hashes of many token sequences, each given as the arrays it is made of
    (`parts[i]`): all of them in one uint64 array, sequence after sequence, and how many
    belong to each (its full blocks). Blocks of different sequences never straddle, so one
    running sum covers them all, and each sequence's chain is that sum since its first
    block. Only the ids of full blocks are copied, once, into the work space."""
    fulls = [sum(len(p) for p in pieces) // block_size for pieces in parts]
    lengths = [n * block_size for n in fulls]
    if not any(lengths):
        return np.zeros(0, dtype=np.uint64), fulls
    words, spare = (scratch or Scratch()).words(sum(lengths))
    ids = spare.view(np.int64)  # the token ids' int64 bit patterns, as `as_words` takes them
    np.concatenate(_full_blocks(parts, lengths), out=ids, casting="unsafe")
    positions = scrambled_positions(max(lengths))
    with np.errstate(over="ignore"):
        np.concatenate([positions[:n] for n in lengths], out=words)
        for lo in range(0, len(words), CACHE_WORDS):
            part, work = words[lo : lo + CACHE_WORDS], spare[lo : lo + CACHE_WORDS]
            part ^= work
            mix64(part, work)
        running = chain_sums(words, block_size)
        first_block = np.cumsum(fulls) - fulls
        before = np.where(first_block > 0, running[np.maximum(first_block - 1, 0)],
                          np.uint64(0))
        return running - np.repeat(before, fulls), fulls


def _full_blocks(parts: Sequence[Sequence[np.ndarray]], lengths: list[int]
                 ) -> list[np.ndarray]:
    """The arrays holding each request's first `lengths[i]` token ids (its full blocks'),
    in order: its parts, the last one cut."""
    out: list[np.ndarray] = []
    for pieces, n in zip(parts, lengths, strict=True):
        for piece in pieces:
            if n <= 0:
                break
            out.append(piece if len(piece) <= n else piece[:n])
            n -= len(piece)
    return out
