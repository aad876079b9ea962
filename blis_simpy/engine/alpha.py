"""What every step-time model shares: the alpha side (a queueing delay a0 + a1*input_len
from arrival to the wait queue, and an output-processing delay a2 added to every token's
emission time), and what a per-request model reads of a batch. Its own module so that the
physical model (physical.py) builds on it without importing latency.py, which picks it.
"""

from __future__ import annotations

from collections.abc import Sequence

from mypy_extensions import mypyc_attr

from blis_simpy.core.request import Request


@mypyc_attr(allow_interpreted_subclasses=True)  # physical.PhysicalLatency is not compiled
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
