"""Inter-token latencies, from the step records, without a value per token.

A request's tokens after the first come one per step in runs of consecutive steps, so its gaps
are those steps' durations: each step's duration is a sample weighted by how many of the
requests emitted a follow-on token in it. The few gaps that span several steps (after a
preemption, or a budget skip) are recorded with the request and added as samples of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from blis_simpy.core.records import InstanceRecord, RequestColumns
from blis_simpy.metrics.summary import Samples


@dataclass(frozen=True, slots=True)
class TokenGaps:
    """Inter-token gaps (µs) of a set of requests: step durations weighted by how many of the
    requests emitted a follow-on token in each step, plus the multi-step gaps."""

    weights: list[np.ndarray]  # per instance, per step
    spans: np.ndarray  # explicit multi-step gaps
    # per instance, its steps by duration (a stable argsort), when the caller has them: a
    # summary sorts each instance's steps once for all its scopes, and each scope's samples
    # are then a few sorted runs, which the sort merges (its order statistics, counts and
    # sums are those of the same multiset, whatever the order of equal values)
    orders: list[np.ndarray] | None = None

    def ordered(self, per_step: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per-instance arrays indexed by step, each in its instance's order by duration
        (`orders`), or as they are without orders."""
        if self.orders is None:
            return list(per_step)
        return [a[o] for a, o in zip(per_step, self.orders, strict=True)]

    def samples(self, instances: Sequence[InstanceRecord], extra: int = 0,
                more: np.ndarray | None = None) -> Samples:
        """Every gap (+ `extra` each), plus the values `more`, as weighted samples."""
        ones = np.ones(len(self.spans) + (0 if more is None else len(more)), dtype=np.int64)
        durations = self.ordered([t.duration for t in instances])
        values = np.concatenate(durations + [self.spans + extra]
                                + ([] if more is None else [more]))
        values[: sum(len(d) for d in durations)] += extra
        return Samples(values, np.concatenate([*self.ordered(self.weights), ones]))


def token_gaps(requests: RequestColumns, chosen: np.ndarray,
               instances: Sequence[InstanceRecord],
               orders: list[np.ndarray] | None = None) -> TokenGaps:
    """Gaps of the requests selected by the boolean mask `chosen` (each must have emitted its
    first token). A run of tokens from step a to step b adds one follow-on token to each of
    steps a+1..b: +1 at a+1 and -1 at b+1 in a difference array, summed at the end. Runs are
    broken by the recorded multi-step gaps (before, after)."""
    lengths = np.array([len(t.duration) for t in instances], dtype=np.int64)
    slots = np.concatenate(([0], np.cumsum(lengths + 1)))  # a difference array per instance
    firsts = np.concatenate(([0], np.cumsum(lengths)))  # where each instance's steps start
    diff = np.zeros(int(slots[-1]), dtype=np.int64)
    rows = np.flatnonzero(chosen)
    base = slots[requests.instance_index[rows]]
    np.add.at(diff, base + requests.first_token_step[rows] + 1, 1)
    np.add.at(diff, base + requests.last_emit_step[rows] + 1, -1)
    mine = chosen[requests.gap_request]
    owner = requests.instance_index[requests.gap_request[mine]]
    before, after = requests.gap_before[mine], requests.gap_after[mine]
    np.add.at(diff, slots[owner] + before + 1, -1)
    np.add.at(diff, slots[owner] + after + 1, 1)
    weights = [np.cumsum(diff[slots[i]: slots[i + 1]])[:-1] for i in range(len(instances))]
    ends = np.concatenate([t.end for t in instances]) if instances else np.zeros(0, np.int64)
    spans = ends[firsts[owner] + after] - ends[firsts[owner] + before]
    return TokenGaps(weights, spans.astype(np.int64), orders)


def duration_orders(instances: Sequence[InstanceRecord]) -> list[np.ndarray]:
    """Each instance's steps by duration (`TokenGaps.orders`)."""
    return [np.argsort(t.duration, kind="stable") for t in instances]
