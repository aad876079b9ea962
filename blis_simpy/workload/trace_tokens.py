"""Token ids for the requests of a trace, made when a request is made (never all at once).

A trace of token ids (the reference's CSV) gives them; a published trace gives only lengths,
so its ids are synthesised from the scenario seed: drawn from the seed's own numpy stream, in
row order (the requests are made once, in that order), so two requests never share a prefix by
accident (their first 16-token block would have to coincide). Mooncake's traces name their
shared prefix blocks instead (one hash id per 512 tokens): a block's tokens are a splitmix64
hash of (seed, hash id, position in the block), so equal hash ids give equal tokens, hence
equal engine block hashes at any engine block size, and a request's last partial block takes
only the tokens it covers.
"""

from __future__ import annotations

import numpy as np

from blis_simpy.core.hashing import mix64
from blis_simpy.core.units import VOCAB
from blis_simpy.rng.streams import stream

_STEP = np.uint64(0x9E3779B97F4A7C15)  # the golden-ratio increment of splitmix64
_BLOCK = np.uint64(0xE7037ED1A0B428DB)  # an arbitrary odd constant: the hash blocks' domain


AHEAD = 1 << 16  # ids drawn at once


class TokenMaker:
    """Deterministic token ids from the scenario seed."""

    def __init__(self, seed: int) -> None:
        self.rng = stream(seed, "workload.trace_tokens")
        self.block_key = mix64(np.array([seed % (1 << 64)], dtype=np.uint64) ^ _BLOCK)
        self.ahead = np.empty(0, dtype=np.int64)  # drawn, not yet handed out from `used` on
        self.used = 0

    def unique(self, count: int) -> np.ndarray:
        """`count` fresh tokens (the next of the stream). Drawn `AHEAD` at a time: numpy
        draws bounded integers one after the other from the stream, so one draw of n + m ids
        is a draw of n then one of m (a call per request cost more than its ids)."""
        start = self.used
        if len(self.ahead) - start < count:
            more = self.rng.integers(0, VOCAB, max(AHEAD, count))
            self.ahead = np.concatenate((self.ahead[start:], more))
            start = 0
        self.used = start + count
        return self.ahead[start:start + count]

    def blocks(self, hash_ids: np.ndarray, length: int, block: int) -> np.ndarray:
        """The first `length` tokens of the blocks `hash_ids` (each `block` tokens long); the
        caller keeps `length <= len(hash_ids) * block`."""
        positions = np.arange(length, dtype=np.uint64)
        streams = mix64(self.block_key ^ hash_ids[positions // np.uint64(block)])
        words = mix64(streams + (positions % np.uint64(block)) * _STEP)
        return (words % np.uint64(VOCAB)).astype(np.int64)


class UniqueTokens:
    """A length-only trace: every request's tokens are its own."""

    def __init__(self, maker: TokenMaker) -> None:
        self.maker = maker

    def sequence(self, payload: object, input_len: int, output_len: int) -> np.ndarray:
        return self.maker.unique(input_len + output_len)


class GivenTokens:
    """A trace of token ids: each row's own, prompt then output."""

    def sequence(self, payload: object, input_len: int, output_len: int) -> np.ndarray:
        assert isinstance(payload, np.ndarray)
        return payload


class HashBlockTokens:
    """Mooncake: the prompt is the row's hash blocks (tokens derived from each hash id), then
    the request's own tokens for any part its hash ids do not cover, then its output."""

    def __init__(self, maker: TokenMaker, block: int) -> None:
        self.maker = maker
        self.block = block

    def sequence(self, payload: object, input_len: int, output_len: int) -> np.ndarray:
        assert isinstance(payload, np.ndarray)
        shared = min(input_len, len(payload) * self.block)
        prefix = self.maker.blocks(payload, shared, self.block)
        rest = self.maker.unique(input_len + output_len - shared)
        return np.concatenate((prefix, rest))
