"""Requests in steady decode, advanced implicitly instead of touched every step.

A decoding request that is scheduled every step gains exactly one token per step, so its state
at step s is (progress, emitted) at its base step plus (s - base). It needs attention only on
the steps where something happens to it: its next token opens a KV block or fills one (the
block's hash is published), or it emits its last token. Those steps are computed in advance
and kept in a bucket per step, so a step costs time proportional to its events, not its batch.
A step time that reads the batch's context lengths (the physical model's KV reads and
attention) gets the implicit decoders' as two sums kept as they come and go (`count`,
`context`).
"""

from __future__ import annotations

from blis_simpy.core.request import Request


class SteadyDecoders:
    """Event buckets for the implicit decoders of one instance."""

    __slots__ = ("block_size", "buckets", "count", "offsets")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        # The bucket of step s is buckets[s % len(buckets)]: filed events lie between the step
        # being formed and a block ahead of the next one, never further than the ring's length.
        self.buckets: list[list[Request]] = [[] for _ in range(block_size + 1)]
        self.count = 0  # implicit decoders
        self.offsets = 0  # the sum of their (progress - lazy_base): see `context`

    def add(self, req: Request, step: int) -> None:
        """Make `req` implicit from `step` on; its progress/emitted are the values at `step`."""
        req.lazy_base = step
        self.count += 1
        self.offsets += req.progress - step
        self.schedule(req, step)

    def context(self, step: int) -> int:
        """The sum of the implicit decoders' progress at the start of `step` (each gains one
        token a step from its base)."""
        return self.offsets + self.count * step

    def schedule(self, req: Request, step: int) -> None:
        """File `req` under its first event at or after `step`: the step whose token opens
        (slot 0) or fills (last slot) a block, or its last token."""
        ahead = step - req.lazy_base
        last = self.block_size - 1
        slot = (req.progress + ahead - req.kv_phase) % self.block_size
        event = step + last - slot if 0 < slot < last else step
        done = step + req.max_tokens - 1 - req.emitted - ahead
        if done < event:
            event = done
        self.buckets[event % len(self.buckets)].append(req)

    def peek(self, step: int) -> list[Request]:
        """The implicit decoders with an event at `step`. A decoder is filed under exactly
        one step at a time and leaves implicit mode only at that step's event or through
        `clear()`, so buckets hold no stale entries."""
        return self.buckets[step % len(self.buckets)]

    def materialize(self, req: Request, step: int) -> None:
        """Write back the request's state as of the start of `step` and make it explicit."""
        self.count -= 1
        self.offsets -= req.progress - req.lazy_base
        ahead = step - req.lazy_base
        if ahead > 0:
            req.progress += ahead
            req.emitted += ahead
            req.last_emit_step = step - 1
        req.lazy_base = -1

    def clear(self) -> None:
        """Forget the buckets once every implicit decoder has been materialized (which has
        brought `count` and `offsets` back to 0)."""
        for bucket in self.buckets:
            bucket.clear()
