"""What the blackbox and roofline step-time models share: the alpha side (a queueing delay
a0 + a1*input_len from arrival to the wait queue, and an output-processing delay a2 added to
every token's emission time), and what a per-request model reads of a batch. The physical
model (physical.py) has its own API-server queue instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from blis_simpy.core.request import Request


class Alpha:
    """The alpha coefficients: queueing delay and output-processing delay, in µs."""

    def __init__(self, alpha: Sequence[float]) -> None:
        self.a0, self.a1 = float(alpha[0]), float(alpha[1])
        self.output_delay = int(float(alpha[2]))

    def queue_delay(self, input_len: int) -> int:
        return int(self.a0 + self.a1 * input_len)


def batch_shape(batch: Sequence[Request]) -> tuple[list[tuple[int, int]], list[int]]:
    """(cached progress, chunk) of each prefilling request and context of each decoding one."""
    prefills: list[tuple[int, int]] = []
    contexts: list[int] = []
    for req in batch:
        if req.chunk < 0:
            contexts.append(req.progress)
        else:
            prefills.append((req.progress, req.chunk))
    return prefills, contexts
