"""Step-time models: how long one engine step takes, and the per-request fixed delays.

Both models share the reference's alpha side: a queueing delay a0 + a1*input_len from arrival to
the wait queue, and an output-processing delay a2 added to every token's emission time (it never
holds the engine). Go's int64() conversion truncates toward zero, so does int().
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from blis_simpy.engine.request import Request
from blis_simpy.engine.roofline import RooflineModel


class LatencyModel(Protocol):
    output_delay: int
    per_request: bool  # does step_time read the batch (not only its token counts)?

    def queue_delay(self, input_len: int) -> int: ...

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request]) -> int:
        """Duration (µs) of a step with `new_tokens` uncached prefill tokens and `decodes`
        decode requests; `batch` is the scheduled requests (progress not yet applied)."""
        ...


class Alpha:
    """The alpha coefficients: queueing delay and output-processing delay, in µs."""

    def __init__(self, alpha: Sequence[float]) -> None:
        self.a0, self.a1 = float(alpha[0]), float(alpha[1])
        self.output_delay = int(float(alpha[2]))

    def queue_delay(self, input_len: int) -> int:
        return int(self.a0 + self.a1 * input_len)


class BlackboxLatency(Alpha):
    """Fitted regression: step = b0 + b1*new prefill tokens (cache misses) + b2*decodes."""

    per_request = False

    def __init__(self, alpha: Sequence[float], beta: Sequence[float]) -> None:
        super().__init__(alpha)
        self.b0, self.b1, self.b2 = float(beta[0]), float(beta[1]), float(beta[2])

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request]) -> int:
        return int(self.b0 + self.b1 * new_tokens + self.b2 * decodes)


class RooflineLatency(Alpha):
    """Analytic step time from model shape and GPU figures (see roofline.py)."""

    per_request = True

    def __init__(self, alpha: Sequence[float], model: RooflineModel) -> None:
        super().__init__(alpha)
        self.model = model

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request]) -> int:
        prefills = []
        contexts = []
        for req in batch:
            if req.chunk < 0:
                contexts.append(req.progress)
            else:
                prefills.append((req.progress, req.chunk))
        return self.model.step_time(prefills, contexts)
