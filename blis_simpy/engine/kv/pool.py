"""The seam between an instance's step loop and its KV blocks.

The engine uses a block pool only through this interface: look up the cached prefix of a
request (a hit may carry a load cost, e.g. blocks reloaded from a lower tier), admit a request
with it, allocate room for new tokens, open and publish decode blocks, free a request's blocks
when it completes or is preempted, and read the counters snapshots and records need. The GPU
cache with prefix caching (`cache.KVCache`) is today's pool (`reference.ReferenceKVCache` in
compat mode); a tiered pool replaces it without touching the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from blis_simpy.core.request import Request


class PrefixHit:
    """The cached blocks of a request's prefix, and the time (µs) it costs to make them usable
    in this step (0 for blocks already on the GPU)."""

    __slots__ = ("blocks", "load_us")

    def __init__(self, blocks: list[int], load_us: int = 0) -> None:
        self.blocks = blocks
        self.load_us = load_us


class BlockPool(Protocol):
    block_size: int
    total: int
    used: int
    hits: int
    misses: int
    failures: int  # allocations at completion that found no block (the reference's rule)

    @property
    def free_blocks(self) -> int: ...

    def lookup(self, req: Request, tokens: int) -> PrefixHit:
        """The longest cached prefix of the request's first `tokens` tokens."""
        ...

    def cached_prefix(self, hashes: Sequence[int]) -> int:
        """How many of these chained block hashes, from the first on, are cached on the GPU
        (what a router reading the real cache is told; counts no hit)."""
        ...

    def cached_hashes(self) -> set[int]:
        """Every block hash cached on the GPU now (a router's periodic copy)."""
        ...

    def admit(self, req: Request, hit: PrefixHit, start: int, tokens: int) -> bool:
        """Give a waiting request its cached prefix and room for positions
        [start, start+tokens); all or nothing."""
        ...

    def prefill_blocks(self, req: Request, start: int, tokens: int) -> int:
        """Free blocks a running request's prefill chunk [start, start+tokens) would take."""
        ...

    def allocate(self, req: Request, start: int, tokens: int) -> bool:
        """Room for sequence positions [start, start+tokens); all or nothing."""
        ...

    def open_block(self, req: Request) -> bool:
        """A decode token that starts a new block."""
        ...

    def publish(self, req: Request, position: int) -> None:
        """The decode token at `position` filled the request's last block: its content can
        now be hit."""
        ...

    def complete(self, req: Request) -> None:
        """The request finished: free its blocks."""
        ...

    def release(self, req: Request) -> None:
        """The request was preempted: free its blocks."""
        ...

    def wipe(self) -> None:
        """The instance failed: every cached block is lost (holders released theirs first)."""
        ...

    def cpu_utilization(self) -> float:
        """Blocks used / total of the CPU tier below the GPU (0.0 without one)."""
        ...

    def check(self) -> None:
        """Raise AssertionError if the pool's accounting is inconsistent."""
        ...
