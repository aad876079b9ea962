"""The measurement window (`evaluation.window`): which requests and which stretch of time a
run's metrics describe.

A run starts with empty queues and cold prefix caches, and a finite workload ends with a drain:
neither is the steady state a capacity planner asks about. Within the window [start, end):
* latencies, SLO attainment and request counts describe the requests that *arrived* in it
  (each followed to its end, even past the window);
* rates (requests, goodput and tokens per second) count what *happened* in it (completions,
  emitted tokens) over its length, so a window cut short of a saturated run's drain does not
  credit it with the work done after the window;
* time averages (queue depth, batch size, KV use) and anomaly counts cover its time;
* the prefix-cache hit rate is the measured requests' cached prompt tokens over their prompt
  tokens (the instances count block lookups for the whole run only).

The default window is the whole run, and then every number is exactly what it was without one
(the whole-run sums are used as they are, not recomputed from times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blis_simpy.config.scenario import MeasurementWindow
from blis_simpy.core.records import RequestColumns
from blis_simpy.core.units import US_PER_S, us


@dataclass(frozen=True, slots=True)
class Window:
    start: int  # µs
    end: int | None  # µs; None: the run's end

    @classmethod
    def of(cls, config: MeasurementWindow) -> Window:
        return cls(us(config.warmup_s), None if config.end_s is None else us(config.end_s))

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end is None

    def stop(self, ended: int) -> int:
        """Where the window ends in a run (or one instance's part of it) that ended at
        `ended`; never before its start."""
        return max(self.start, ended if self.end is None else min(self.end, ended))

    def seconds(self, ended: int) -> float:
        return (self.stop(ended) - self.start) / US_PER_S

    def arrived(self, arrival: np.ndarray) -> np.ndarray:
        """The requests that arrived within the window (arrival times in µs)."""
        keep = arrival >= self.start
        return keep if self.end is None else keep & (arrival < self.end)

    def within(self, times: np.ndarray) -> np.ndarray:
        """Events within the window (µs; -1 where the event did not happen)."""
        keep = (times >= self.start) & (times >= 0)
        return keep if self.end is None else keep & (times < self.end)

    def tokens(self, req: RequestColumns, rows: np.ndarray, ended: int) -> float:
        """Output tokens the selected requests emitted within the window. Token times are not
        recorded one by one: a request's first token is at its first-token time and the rest
        are spread evenly up to its last one (completion, timeout, or the run's end), so only
        the requests spanning an edge of the window are apportioned."""
        if self.whole:
            return float(req.emitted[rows].sum())
        # open-ended: everything after the start (a token is delivered after its step ends,
        # so the last ones can be later than the run's last event)
        limit = math.inf if self.end is None else self.stop(ended)
        first = req.first_token_at[rows].astype(float)
        emitted = req.emitted[rows].astype(float)
        last = np.where(req.completed_at[rows] >= 0, req.completed_at[rows],
                        np.where(req.timed_out_at[rows] >= 0, req.timed_out_at[rows], ended))
        last = np.maximum(last.astype(float), first)
        started = first >= 0
        total = ((first >= self.start) & (first < limit) & started).sum()
        rest = np.maximum(emitted - 1, 0) * started
        span = last - first
        overlap = np.clip(np.minimum(last, limit) - np.maximum(first, self.start), 0, None)
        instant = (last >= self.start) & (last < limit)  # all the tokens at one time
        share = np.where(span > 0, overlap / np.where(span > 0, span, 1), instant)
        return float(total + (rest * share).sum())

    def hit_rate(self, req: RequestColumns, rows: np.ndarray) -> float:
        """Cached prompt tokens over prompt tokens of the selected requests that were
        scheduled."""
        served = rows & (req.cached_tokens >= 0)
        prompts = int(req.input_len[served].sum())
        return int(req.cached_tokens[served].sum()) / prompts if prompts else 0.0
