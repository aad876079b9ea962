"""Columnar facts about a finished run, built once from requests and step rows.

Inter-token latencies never exist as per-token objects: a request's tokens after the first come
one per step in runs of consecutive steps, so its gaps are those steps' durations. The few gaps
that span several steps (after a preemption, or a budget skip) are kept on the request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blis_simpy.engine.instance import Instance
from blis_simpy.engine.request import Request, State
from blis_simpy.metrics.summary import Samples


@dataclass(frozen=True, slots=True)
class StepTable:
    """One instance's steps as arrays, indexed by step number."""

    start: np.ndarray
    duration: np.ndarray
    new_tokens: np.ndarray
    decodes: np.ndarray
    batch_size: np.ndarray
    kv_used: np.ndarray
    queue_depth: np.ndarray

    @property
    def end(self) -> np.ndarray:
        return self.start + self.duration

    @classmethod
    def of(cls, instance: Instance) -> StepTable:
        rows = np.array(instance.steps, dtype=np.int64).reshape(-1, 7)
        return cls(*(rows[:, i].copy() for i in range(7)))


@dataclass(frozen=True, slots=True)
class TokenGaps:
    """Inter-token gaps (µs) of a set of requests: step durations weighted by how many of the
    requests emitted a follow-on token in each step, plus the multi-step gaps."""

    weights: list[np.ndarray]  # per instance, per step
    spans: np.ndarray  # explicit multi-step gaps

    def samples(self, steps: list[StepTable], extra: int = 0,
                more: np.ndarray | None = None) -> Samples:
        """Every gap (+ `extra` each), plus the values `more`, as weighted samples."""
        ones = np.ones(len(self.spans) + (0 if more is None else len(more)), dtype=np.int64)
        values = np.concatenate([t.duration for t in steps] + [self.spans + extra]
                                + ([] if more is None else [more]))
        values[: sum(len(t.duration) for t in steps)] += extra
        return Samples(values, np.concatenate([*self.weights, ones]))


def token_gaps(requests: list[Request], steps: list[StepTable]) -> TokenGaps:
    """Gaps of `requests` (each must have emitted its first token)."""
    diffs = [np.zeros(len(t.duration) + 1, dtype=np.int64) for t in steps]
    spans: list[int] = []
    for req in requests:
        diff = diffs[req.instance]
        start = req.first_token_step
        for before, after in req.gaps or ():
            diff[start + 1] += 1
            diff[before + 1] -= 1
            ends = steps[req.instance].end
            spans.append(int(ends[after] - ends[before]))
            start = after
        diff[start + 1] += 1
        diff[req.last_emit_step + 1] -= 1
    weights = [np.cumsum(d[:-1]) for d in diffs]
    return TokenGaps(weights, np.array(spans, dtype=np.int64))


def completed(requests: list[Request]) -> list[Request]:
    return [r for r in requests if r.state is State.COMPLETED]
