"""Reporting conventions: how a run's records become reported numbers.

Two conventions share every metric function; the one in use is chosen once, at build time:
* `Conventions` (native): every latency is what a client would measure. TTFT = first token -
  arrival, E2E = last token - arrival, inter-token latency = gap between consecutive tokens;
  every generated token counts once; the cache hit rate pools all instances' lookups.
* `ReferenceConventions` (`compat: blis`): the reference's reporting (spec engine.md §9): the
  output delay a2 is added to every ITL sample, each request gets one extra ITL sample (its
  last step + a2) that E2E also counts (Q3), output tokens exclude each request's first token
  (Q9), injected requests miss those still inside their queueing delay, and the cache hit rate
  is the mean of the instances' rates.
The reference's engine timing (idle from the start of the last step) and KV hash-map rules are
engine behaviours, chosen with these conventions in `blis_simpy.sim.modes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from blis_simpy.core.records import InstanceRecord, RequestColumns
from blis_simpy.core.request import State
from blis_simpy.metrics.gaps import TokenGaps
from blis_simpy.metrics.summary import Samples


@dataclass(frozen=True, slots=True)
class RequestLatencies:
    """Per-request latencies (µs) in the chosen convention, aligned with the request columns."""

    ttft: np.ndarray  # -1 where no first token
    e2e: np.ndarray  # -1 where not completed
    itl_mean: np.ndarray  # float; 0 where not completed or fewer than 2 tokens
    scheduling_delay: np.ndarray  # -1 where never scheduled


# The durations of steps given as (instance positions, step numbers): from every step's
# record in memory, or from the steps a streaming run still holds (metrics/stream.py).
StepDurations = Callable[[np.ndarray, np.ndarray], np.ndarray]


def step_durations(instances: Sequence[InstanceRecord]) -> StepDurations:
    """Step durations looked up in the instances' records."""
    flat = np.concatenate([t.duration for t in instances]) if instances else np.zeros(0,
                                                                                    np.int64)
    starts = np.concatenate(([0], np.cumsum([len(t.duration) for t in instances])))
    firsts = starts.astype(np.int64)
    return lambda where, steps: flat[firsts[where] + steps]


def last_step_durations(req: RequestColumns, rows: np.ndarray, durations: StepDurations
                        ) -> np.ndarray:
    """Duration of the step that emitted each selected request's last token."""
    return durations(req.instance_index[rows], req.last_emit_step[rows])


class Conventions:
    """Native reporting: what a client would measure."""

    name = "native"
    gap_delay = 0  # added to every inter-token gap (the reference: its output delay a2)
    closing_gap = False  # the reference: one more gap per completed request, last step + a2
    # the unfinished requests' final states that `still_running` counts: a P/D request
    # between its prefill and its first decode step is in service (`still_queued` counts the
    # queued ones; one still `arriving`, in an admission delay, routing or its queueing
    # delay, is in neither, and the warnings name those when nothing completed)
    in_service: tuple[str, ...] = (str(State.RUNNING), str(State.TRANSFERRING))

    def latencies(self, req: RequestColumns, durations: StepDurations) -> RequestLatencies:
        first, done_at = req.first_token_at, req.completed_at
        ttft = np.where(first >= 0, first - req.arrival, -1)
        done = done_at >= 0
        span = done_at - first  # first token to last token
        out = req.output_len
        e2e = np.where(done, done_at - req.arrival, -1)
        itl_mean = np.where(done & (out > 1), span / np.maximum(out - 1, 1), 0.0)
        return RequestLatencies(ttft, e2e, itl_mean, self.scheduling_delay(req))

    @staticmethod
    def scheduling_delay(req: RequestColumns) -> np.ndarray:
        scheduled = req.first_scheduled
        return np.where(scheduled >= 0, scheduled - req.arrival, -1)

    def itl(self, gaps: TokenGaps, req: RequestColumns, finished: np.ndarray,
            instances: Sequence[InstanceRecord]) -> Samples:
        delay = self.gap_delay
        more = None
        if self.closing_gap:
            more = last_step_durations(req, np.flatnonzero(finished),
                                       step_durations(instances)) + delay
        return gaps.samples(instances, delay, more)

    def client_itl(self, itl: Samples) -> Samples | None:
        """`itl` (this reporting's inter-token gaps) if it is also what a client measures
        (vLLM's ITL: every gap as it is, none added), else None."""
        return itl if self.gap_delay == 0 and not self.closing_gap else None

    def output_tokens(self, req: RequestColumns, chosen: np.ndarray) -> int:
        return int(self.counted_tokens(req)[chosen].sum())

    def counted_tokens(self, req: RequestColumns) -> np.ndarray:
        """Each request's output tokens as the summary counts them."""
        return req.emitted

    def injected(self, arrived: int, rejected: int, completed: int, queued: int,
                 running: int) -> int:
        return arrived - rejected

    @staticmethod
    def ttft_population(chosen: np.ndarray, finished: np.ndarray) -> np.ndarray:
        """Whose TTFTs the summary's `ttft_*` count: the completed requests, the population
        of its E2E and of vLLM's benchmark, so a TTFT never exceeds the E2E it is part of
        (a request cut by a horizon or its client's timeout after its first token is not)."""
        return finished

    def hit_rate(self, instances: Sequence[InstanceRecord], cached_tokens: int,
                 prompt_tokens: int) -> float:
        """The prefix cache's hit rate: the measured requests' prompt tokens found cached
        when first scheduled, over their prompt tokens (the requests table's `cached_tokens`
        over `input_tokens`), with or without a measurement window."""
        return cached_tokens / prompt_tokens if prompt_tokens else 0.0


class ReferenceConventions(Conventions):
    """The reference's reporting (compat mode); `output_delay` is its a2 (µs)."""

    name = "blis"
    closing_gap = True
    in_service = (str(State.RUNNING),)  # the reference's batches

    def __init__(self, output_delay: int) -> None:
        self.output_delay = self.gap_delay = output_delay

    def latencies(self, req: RequestColumns, durations: StepDurations) -> RequestLatencies:
        first, done_at, out = req.first_token_at, req.completed_at, req.output_len
        ttft = np.where(first >= 0, first - req.arrival, -1)
        done = done_at >= 0
        rows = np.flatnonzero(done)
        last_step = np.zeros(len(req), dtype=np.int64)
        last_step[rows] = last_step_durations(req, rows, durations)
        itl_sum = done_at - first + np.maximum(out, 1) * self.output_delay + last_step
        e2e = np.where(done, ttft + itl_sum, -1)
        itl_mean = np.where(done & (out > 0), itl_sum / np.maximum(out - 1, 1), 0.0)
        return RequestLatencies(ttft, e2e, itl_mean, self.scheduling_delay(req))

    def counted_tokens(self, req: RequestColumns) -> np.ndarray:
        return np.maximum(req.emitted - 1, 0)

    def injected(self, arrived: int, rejected: int, completed: int, queued: int,
                 running: int) -> int:
        return completed + queued + running

    @staticmethod
    def ttft_population(chosen: np.ndarray, finished: np.ndarray) -> np.ndarray:
        """The reference's TTFT samples: every request whose prefill finished."""
        return chosen

    def hit_rate(self, instances: Sequence[InstanceRecord], cached_tokens: int,
                 prompt_tokens: int) -> float:
        """The reference's figure: the mean of the instances' own block lookup rates (compat
        mode refuses a measurement window, so it is always the whole run's)."""
        rates = [i.kv_hits / (i.kv_hits + i.kv_misses) if i.kv_hits + i.kv_misses else 0.0
                 for i in instances]
        return sum(rates) / len(rates)
