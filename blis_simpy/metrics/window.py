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

NEVER = np.iinfo(np.int64).max  # the end of an open-ended window (µs)


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
        are spread evenly up to its last one (completion, timeout, or `ended` for one still
        running at the end), so only the requests spanning an edge of the window are
        apportioned. Summed exactly (those shares rounded once), so a streaming run, which
        sees the requests in another order, finds the same figure."""
        if self.whole:
            return float(req.emitted[rows].sum())
        last = np.where(req.completed_at[rows] >= 0, req.completed_at[rows],
                        np.where(req.timed_out_at[rows] >= 0, req.timed_out_at[rows], ended))
        whole, shares = self.token_shares(req.first_token_at[rows], req.emitted[rows], last)
        return self.total(whole, shares)

    def token_shares(self, first: np.ndarray, emitted: np.ndarray, last: np.ndarray
                     ) -> tuple[int, np.ndarray]:
        """The tokens emitted within the window by requests whose first token came at
        `first` (-1: none) and their last at `last`: those counted whole, and the fractional
        shares of the requests spanning an edge (`total` adds them up). A token is delivered
        after its step ends, so the last ones can come after the run's last event: an
        open-ended window counts them."""
        limit = NEVER if self.end is None else self.end
        started = first >= 0
        last = np.maximum(last, first)
        whole = int((started & (first >= self.start) & (first < limit)).sum())
        rest = np.maximum(emitted - 1, 0) * started
        span = last - first
        overlap = np.maximum(np.minimum(last, limit) - np.maximum(first, self.start), 0)
        instant = (last >= self.start) & (last < limit)  # all the tokens at one time
        full = np.where(span > 0, overlap == span, instant)
        part = started & (span > 0) & (overlap > 0) & (overlap < span)
        whole += int(rest[full].sum())
        return whole, rest[part] * (overlap[part] / span[part])

    @staticmethod
    def total(whole: int, shares: np.ndarray) -> float:
        return math.fsum([whole, *shares.tolist()])

    @staticmethod
    def prompt_cache(req: RequestColumns, rows: np.ndarray) -> tuple[int, int]:
        """The selected requests' cached prompt tokens and prompt tokens, of those that were
        scheduled (the prefix cache's hit rate is their ratio)."""
        served = rows & (req.cached_tokens >= 0)
        return int(req.cached_tokens[served].sum()), int(req.input_len[served].sum())
