"""The saturation verdict: does the system keep up with the load it is offered, and how much
more could it take?

Over the measured arrivals (the window's start to its last arrival):
* `offered_rate_per_s`: requests arriving per second; `served_rate_per_s`: requests completing
  per second in the same span (below the offered rate at the start of any run, while the first
  requests are still being served; far below it, and falling, when the system cannot keep up);
* `queue_growth_per_s`: the least-squares slope of the number of requests waiting to be served
  (arrived, not yet scheduled on an instance) over the second half of the span, a request not
  served (timed out, shed, lost: `unserved`) waiting for good, the queue it would have formed.
  Continuous batching absorbs load into the running batch, so in a system that keeps up this
  stays near zero; past capacity (batch slots, KV blocks or the token budget exhausted) it
  grows by the excess rate, and so it does when requests fail at more than that share;
* the verdict: `saturated` when the waiting queue grew by more than `GROWTH_SHARE` of the
  offered rate and at least `MIN_WAITING` requests (and 1 % of the arrivals) wait at the end,
  or when it did not grow but the offered rate is above `MODEL_OVER` x the step-cost model's
  capacity (a run too short to show it, a closed loop's standing queue: `reason` says so);
  `sustainable` otherwise; `undetermined` with fewer than `MIN_ARRIVALS`
  arrivals, when none completed (nothing was served: no rate to judge), or for a batch
  (every arrival within 1 / `BATCH` of the time to the first completion: not a rate);
* `max_sustainable_rate_per_s`, the highest request rate the system would sustain with this
  request mix (the queue starts to grow beyond it; latency targets may allow less), estimated:
  when the queue grew, as measured: the rate at which requests completed from the span's
  middle until the queue emptied after the last arrival (the servers were as busy as they
  get; `busy_rate`), unless requests not served made the queue while the others all entered
  service at once (completions then measure what was served: `unserved` says so); otherwise
  from the step costs of this run (`capacity`, also reported on its own as
  `capacity_model_per_s`: the whole fleet, evenly loaded; a saturated run whose model
  capacity exceeds the offered rate was saturated by uneven routing, not by too few
  instances, unless requests not served made its queue: `spread_capacity`);
* `load_factor` = offered / max sustainable, and `headroom` = 1 - load factor: the share of
  the sustainable rate still unused (negative when overloaded). This is what to read for
  capacity, not `utilization`: an engine with continuous batching runs a step whenever
  anything is in its batch, so its busy fraction is close to 1 at almost any load.

The saturation detector labels the run and each window of the span (`evaluation.saturation.
window_s`, by default a tenth of it) with the same two measures the verdict reads, queue growth
and the requests waiting, against throughput (offered and served per second):
* OVERLOADED: the waiting queue grew by more than `GROWTH_SHARE` of the offered rate and a
  queue stands at the window's end (`MIN_WAITING` requests, and 1 % of the run's arrivals):
  arrivals outpace what the servers take in;
* BACKLOGGED: a queue that size stands at the window's end but did not grow: the servers keep
  up with the arrivals without clearing what is already waiting (after a burst, or a standing
  queue);
* STABLE: no such queue.
The run's level is OVERLOADED when the verdict is `saturated`, BACKLOGGED when some window was
not STABLE or a queue stands at the end of the span (the run fell behind and did not stay
behind, or not yet measurably), STABLE otherwise; none (no `level`, no `windows`) when the
verdict is `undetermined`.
Each stretch of OVERLOADED windows is also an `overload` anomaly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from typing import Any, Protocol

import numpy as np

from blis_simpy.config.resolve import latency_type
from blis_simpy.config.scenario import EngineConfig, LatencyConfig, Scenario
from blis_simpy.core.records import Anomaly, InstanceRecord, Records, RequestColumns
from blis_simpy.core.request import RejectCode, State
from blis_simpy.core.schema import load
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.moments import dot
from blis_simpy.metrics.window import Window

GROWTH_SHARE = 0.02  # queue growth above this share of the offered rate ...
MIN_WAITING = 10  # ... with at least this many requests (and 1 % of arrivals) waiting at the end
MIN_ARRIVALS = 30  # fewer measured arrivals: no verdict
GRID = 200  # points the waiting count is sampled at over the second half


class Timeline(Protocol):
    """When the run's requests arrived, left the waiting state, entered service and
    completed: counted, never listed (a streaming run keeps them in a scratch file)."""

    def measured(self) -> tuple[int, int, int]:
        """The measured arrivals (within the window): how many, the last one's time, and how
        many of them were not served (`unserved`)."""

    def between(self, column: str, low: float, high: float) -> int:
        """How many `completed` or `entered` (first scheduled) times lie in [low, high]."""

    def by(self, column: str, times: np.ndarray) -> np.ndarray:
        """How many `arrived` or `left` times (a request that never left has none: one not
        served never does, `leaving_times`) are at or before each of `times`."""

    def ttfts(self, times: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """How many requests that got a first token arrived in each bin of `times` (µs) with a
        TTFT (µs) in each bin of `edges`: one row per bin of `times`."""


@dataclass(frozen=True, slots=True)
class Timelines:
    """A run's timeline from its request columns (every request in memory)."""

    arrived: np.ndarray
    left: np.ndarray
    completed: np.ndarray
    entered: np.ndarray
    window: Window
    first_token: np.ndarray | None = None  # (None: no TTFT, no warm-up check)
    unserved: int = 0  # measured arrivals not served (`unserved`)

    @classmethod
    def of(cls, records: Records, window: Window) -> Timelines:
        req = records.requests
        measured = window.arrived(req.arrival)
        return cls(req.arrival, leaving_times(req), req.completed_at, req.first_scheduled,
                   window, req.first_token_at, int((unserved(req) & measured).sum()))

    def measured(self) -> tuple[int, int, int]:
        arrivals = self.arrived[self.window.arrived(self.arrived)]
        return len(arrivals), int(arrivals.max()) if len(arrivals) else -1, self.unserved

    def between(self, column: str, low: float, high: float) -> int:
        return count_between(getattr(self, column), low, high)

    def by(self, column: str, times: np.ndarray) -> np.ndarray:
        return count_by(getattr(self, column), times)

    def ttfts(self, times: np.ndarray, edges: np.ndarray) -> np.ndarray:
        if self.first_token is None:
            return np.zeros((len(times) - 1, len(edges) - 1), dtype=np.int64)
        return ttft_counts(self.arrived, self.first_token, times, edges)


# Rejections no rate of arrivals would change: the request is too long for the engine.
TOO_LONG = frozenset({RejectCode.MAX_MODEL_LEN, RejectCode.KV_CAPACITY,
                      RejectCode.PD_DECODE_CAPACITY})


def unserved(req: RequestColumns) -> np.ndarray:
    """The requests the system did not serve: timed out (their clients gave up), rejected
    (admission shed them, a P/D handoff dropped them) or lost with a failed instance; not
    those rejected as too long for the engine, which no load would have served."""
    too_long = np.isin(np.asarray(req.reject_code, dtype=object), list(TOO_LONG))
    return (req.in_state(State.TIMED_OUT) | req.in_state(State.FAILED)
            | (req.in_state(State.REJECTED) & ~too_long))


def leaving_times(req: RequestColumns) -> np.ndarray:
    """When each request stopped waiting to be served: its first scheduling; never (-1) when
    it was not served (`unserved`): it counts as waiting from its arrival on, the queue it
    would have formed had its client stayed (a client timeout, a shed or a failure otherwise
    hides the queue: 85 % of the quickstart's requests timed out at 34 req/s with a 2 s
    timeout while the queue of the others stayed flat); its arrival for a request too long
    for the engine (never waiting); -1 also if it was still waiting when the run ended."""
    left = np.where(unserved(req), -1, req.first_scheduled)
    too_long = (left < 0) & req.in_state(State.REJECTED)
    left[too_long] = req.arrival[too_long]
    return left


def count_between(values: np.ndarray, low: float, high: float) -> int:
    return int(((values >= low) & (values <= high)).sum())


def ttft_counts(arrived: np.ndarray, first: np.ndarray, times: np.ndarray, edges: np.ndarray
                ) -> np.ndarray:
    """The requests that got a first token, counted by when they arrived (bins of `times`)
    and their TTFT (bins of `edges`), both µs."""
    got = first >= 0
    counts = np.histogram2d(arrived[got].astype(float), (first[got] - arrived[got]).astype(float),
                            bins=[times, edges])[0]
    return counts.astype(np.int64)


def count_by(values: np.ndarray, times: np.ndarray) -> np.ndarray:
    """How many of the values (-1: none) are at or before each time."""
    return np.searchsorted(np.sort(values[values >= 0]), times, side="right")


def saturation(timeline: Timeline, window: Window,
               capacity: Callable[[], tuple[float | None, str]],
               window_s: float | None = None) -> dict[str, Any]:
    """The verdict, its evidence and the detector's levels (module docstring), for
    summary.json `saturation`; `capacity` gives the step-cost model's estimate and how it was
    made (`capacity`), `window_s` the detector's window length (None: a tenth of the span)."""
    count, end, failed = timeline.measured()
    start = window.start
    out: dict[str, Any] = {"verdict": "undetermined"}
    if count < MIN_ARRIVALS:
        out["reason"] = (f"only {count} requests arrived in the measurement window "
                         f"(a verdict needs {MIN_ARRIVALS})")
        return out
    if timeline.between("completed", start, np.inf) == 0:
        out["reason"] = (f"nothing was served: none of the {count} requests that arrived "
                         "completed (rejected, timed out or still in service at the end)")
        return out
    if end <= start or timeline.between("completed", start,
                                        start + BATCH * (end - start)) == 0:
        out["reason"] = (f"a batch, not a rate: all {count} requests arrived within "
                         f"{(end - start) / US_PER_S:.3g} s, less than a tenth of the time the "
                         "first of them took to complete")
        out["batch"] = {"requests": count, "span_s": (end - start) / US_PER_S}
        return out
    seconds = (end - start) / US_PER_S
    offered = count / seconds
    served = timeline.between("completed", start, end) / seconds
    middle = start + (end - start) // 2
    grid = np.linspace(middle, end, GRID)
    waiting = (timeline.by("arrived", grid) - timeline.by("left", grid)).astype(float)
    growth = float(np.polyfit(grid / US_PER_S, waiting, 1)[0])
    at_end = int(waiting[-1])
    floor = max(MIN_WAITING, 0.01 * count)
    grew = growth > GROWTH_SHARE * offered and at_end >= floor
    model, how = capacity()
    # The queue had not grown (a short run, a closed loop's standing queue) but the offered
    # work clearly exceeds what the step costs allow.
    beyond = not grew and model is not None and offered > MODEL_OVER * model
    saturated = grew or beyond
    out = {"verdict": "saturated" if saturated else "sustainable",
           "span_s": [start / US_PER_S, end / US_PER_S],
           "offered_rate_per_s": offered, "served_rate_per_s": served,
           "queue_growth_per_s": growth, "waiting_at_end": at_end}
    # Requests not served made the queue, and the servers never held one of their own
    # (everyone else entered service at once): completions measure what was served, not what
    # the servers could serve.
    shed = grew and failed >= floor and int(
        timeline.by("arrived", grid[-1:])[0] - timeline.by("entered", grid[-1:])[0]) < floor
    if failed:
        out["unserved_rate_per_s"] = failed / seconds
    if grew and failed >= floor:
        out["unserved"] = (
            f"{failed} of the {count} requests were not served (timed out, rejected or lost): "
            "they count as waiting from their arrival, the queue they would have formed" + (
                f", although the offered load is {offered / model:.2f}x the step-cost model's "
                "capacity: not for lack of capacity (a client timeout shorter than the "
                "requests take, an admission policy shedding)"
                if shed and model is not None and offered < model else ""))
    best, method = model, "step-cost model"
    if grew:
        rate, begin, stop, short = busy_rate(timeline, middle, end, floor)
        if shed and model is not None:
            out["measured_rate_per_s"] = rate
            method = ("step-cost model (requests not served made the queue while every other "
                      f"one entered service at once: completions, {rate:.3g} req/s, measure "
                      "what was served, not what the servers could serve)")
        elif short is None or model is None:
            best = rate
            method = ("measured: the rate requests completed while requests waited (from "
                      f"t={begin / US_PER_S:.4g} s to t={stop / US_PER_S:.4g} s, when the wait "
                      "queue emptied or the run ended)" + (
                          f"; too short to be sure: {short}" if short else ""))
        else:
            out["measured_rate_per_s"] = rate
            method = (f"step-cost model (the run is too short to measure the rate: {short}; "
                      f"completions then read {rate:.3g} req/s)")
    elif model is not None and beyond:
        out["reason"] = (f"the offered load is {offered / model:.2f}x the step-cost model's "
                         "capacity, but the wait queue did not grow within the span (the run "
                         "is too short to show it, or a closed loop's queue stands instead of "
                         "growing)")
        method = "step-cost model (the wait queue did not grow within the span)"
    out["max_sustainable_rate_per_s"] = best
    out["max_sustainable_method"] = method
    out["capacity_model_per_s"] = model
    out["capacity_model"] = how
    out["load_factor"] = offered / best if best else None
    out["headroom"] = 1 - offered / best if best else None
    windows = labelled_windows(timeline, start, end, floor, window_s)
    out["level"] = (OVERLOADED if saturated else BACKLOGGED
                    if at_end >= floor or any(w["level"] != STABLE for w in windows)
                    else STABLE)
    out["windows"] = windows
    if not saturated:
        bias = warmup(timeline, start, end)
        if bias is not None:
            out["warmup"] = bias
    return out


def spread_capacity(verdict: dict[str, Any]) -> float | None:
    """The step-cost model's capacity when it says the fleet would carry the offered load
    spread evenly (a saturated run was then unevenly routed); None when it does not, or
    cannot be trusted to: requests not served made the queue (the model is then above the
    load whatever the routing)."""
    model = verdict.get("capacity_model_per_s")
    if not model or model <= verdict["offered_rate_per_s"] or "unserved" in verdict:
        return None
    return float(model)


EDGES = np.geomspace(10, 1e10, 361)  # TTFT bins (µs): 10 µs to about 3 hours, 4 % apart
PARTS = 10  # the span's first tenth compared with each later one
WARMUP_QUANTILE = 0.9  # the TTFT quantile compared (a cold cache shows in the tail)
WARMUP_RATIO = 1.25  # ... beyond every later tenth's by this factor: warm-up biased
SAME_LOAD = 1.25  # ... when the first tenth's offered rate is within this ratio of the rest's
MIN_FIRST, MIN_LATER = 50, 20  # requests with a first token in the first tenth, in a later one
MIN_TENTHS = 5  # later tenths with that many, at least


def warmup(timeline: Timeline, start: int, end: int) -> dict[str, Any] | None:
    """Whether the span's first tenth measurably differs from the rest at the same load: the
    90th-percentile TTFT of the requests that arrived in it lies beyond that of every later
    tenth by more than `WARMUP_RATIO` (lower or higher), although it was offered a rate within
    `SAME_LOAD` of the rest's. Against every later tenth, not the rest as a whole: a run whose
    later part changes (replicas fail, a surge) is not steady after its start either, and its
    first tenth is then no outlier. The system started empty, with cold caches: its first
    requests are served faster (smaller batches) or slower (no prefix hits) than in the steady
    state. None when it does not, or cannot be told."""
    times = np.linspace(start, end + 1, PARTS + 1)
    counts = timeline.ttfts(times, EDGES)
    if counts[0].sum() < MIN_FIRST:
        return None
    later = [quantile_of(row, WARMUP_QUANTILE) for row in counts[1:] if row.sum() >= MIN_LATER]
    if len(later) < MIN_TENTHS:
        return None
    arrived = timeline.by("arrived", np.array([start - 1, times[1], end], dtype=float))
    first_rate = (arrived[1] - arrived[0]) / (times[1] - start)
    rest_rate = (arrived[2] - arrived[1]) / (end - times[1])
    if min(first_rate, rest_rate) <= 0 or max(first_rate, rest_rate) > SAME_LOAD * min(
            first_rate, rest_rate):
        return None
    first = quantile_of(counts[0], WARMUP_QUANTILE)
    if WARMUP_RATIO * max(later) >= first >= min(later) / WARMUP_RATIO:
        return None
    return {"span_s": [start / US_PER_S, float(times[1]) / US_PER_S],
            "early_ttft_p90_ms": first / 1e3,
            "later_ttft_p90_ms": [min(later) / 1e3, max(later) / 1e3]}


def quantile_of(counts: np.ndarray, q: float) -> float:
    """The `q` quantile (µs) of values counted in the bins of `EDGES` (each bin's geometric
    middle)."""
    at = int(np.searchsorted(np.cumsum(counts), q * counts.sum()))
    return float(np.sqrt(EDGES[at] * EDGES[at + 1]))


BATCH = 10  # arrivals all within a tenth of the first completion's time: a batch, not a rate
MODEL_OVER = 1.1  # offered above this multiple of the step-cost model's capacity: saturated
DRAIN_STEPS = 60  # doublings of the half-span searched for the end of the busy stretch


def busy_rate(timeline: Timeline, middle: int, end: int, floor: float
              ) -> tuple[float, int, int, str | None]:
    """The rate requests completed while the wait queue held at least `floor` requests: from
    the span's middle (the queue grew over the second half, so the servers were as busy as they
    get), or the first completion after it, through the drain after the last arrival, to the
    first time the queue fell below `floor` or, if it never did (a horizon cut), the last
    completion, once the batch turned over (`turned_over`); with that stretch's start and
    end (µs), and why it is too short to measure (None when it is not; the rate is then over
    the whole stretch). Completions, not entries into service: a
    request that stays in service longer than the half-span fills the batch in the first half,
    and few enter in the second although the servers complete work at their full rate."""
    half = max(1, end - middle)
    coarse = np.append(float(end), end + half * 2.0 ** np.arange(-1, DRAIN_STEPS))
    still = busy(timeline, coarse, floor)
    first = int(np.argmin(still)) if not still.all() else len(coarse) - 1
    fine = np.linspace(coarse[max(0, first - 1)], coarse[first], GRID)
    still = busy(timeline, fine, floor)
    stop = float(fine[int(np.argmin(still))] if not still.all() else fine[-1])
    # From the first completion after the middle: requests served longer than the half-span
    # complete nothing for a while, which says nothing about the rate once they do.
    grid = np.linspace(float(middle), stop, GRID)
    done = timeline.by("completed", grid)
    begin = grid[max(0, int(np.argmax(done > done[0])) - 1)] if done[-1] > done[0] else grid[0]
    turned, short = turned_over(timeline, middle, stop, floor)
    if short is None:
        begin = max(begin, turned)
    rate = float(done[-1] - timeline.by("completed", np.array([begin]))[0]) / (
        (stop - begin) / US_PER_S) if stop > begin else 0.0
    return rate, int(begin), int(stop), short


MIN_MEASURED = 30  # completions a measured rate needs after the batch turned over


def turned_over(timeline: Timeline, middle: int, stop: float, floor: float
                ) -> tuple[float, str | None]:
    """When the servers' batch had turned over once since it filled (µs), and why the busy
    stretch is too short to measure (None when it is not). The batch fills when the wait queue
    forms (the start of the queue standing at the span's middle, or its first forming after);
    until every request in service then has completed, completions lag the full rate: a batch
    still growing holds requests that entered lately, and the steps slow as it grows (a 10 s
    run at 1.4x one replica's capacity read half of it). Too short when it had not turned
    over by `stop`, or fewer than `MIN_MEASURED` requests completed after."""
    grid = np.linspace(0.0, stop, 4 * GRID)
    waiting = timeline.by("arrived", grid) - timeline.by("left", grid)
    queued = waiting >= floor
    at = int(np.searchsorted(grid, middle))
    if queued[min(at, len(grid) - 1)]:
        before = np.flatnonzero(~queued[:at])
        filled = int(before[-1]) + 1 if len(before) else 0
    else:
        after = np.flatnonzero(queued[at:])
        filled = at + int(after[0]) if len(after) else len(grid) - 1
    done = timeline.by("completed", np.append(grid, stop))
    serving = int(timeline.by("entered", grid[filled:filled + 1])[0]) - int(done[filled])
    over = np.flatnonzero(done[filled:-1] >= done[filled] + serving)
    when = float(grid[filled + int(over[0])]) if len(over) else stop
    if not len(over) or done[-1] - done[filled + int(over[0])] < MIN_MEASURED:
        return when, (f"its servers filled at t={grid[filled] / US_PER_S:.3g} s with "
                      f"{serving} requests in service, and {int(done[-1] - done[filled])} "
                      f"completed by t={stop / US_PER_S:.4g} s" + (
                          f", {int(done[-1] - done[filled + int(over[0])])} after it turned "
                          "over once" if len(over) else ", not one turnover"))
    return when, None


def busy(timeline: Timeline, times: np.ndarray, floor: float) -> np.ndarray:
    """At each time: do `floor` requests or more still wait, with a completion still to come?"""
    waiting = timeline.by("arrived", times) - timeline.by("left", times)
    done = timeline.by("completed", np.append(times, np.inf))
    return (waiting >= floor) & (done[:-1] < done[-1])


STABLE, BACKLOGGED, OVERLOADED = "STABLE", "BACKLOGGED", "OVERLOADED"
WINDOWS = 10  # windows over the span when evaluation.saturation.window_s is not set
MAX_WINDOWS = 1000  # a shorter window_s is widened to span / this (summary.json stays small)
POINTS = 20  # points each window's waiting count is sampled at, for its slope


def labelled_windows(timeline: Timeline, start: int, end: int, floor: float,
                     window_s: float | None) -> list[dict[str, Any]]:
    """The span [start, end] (µs) cut into windows of `window_s` (at most `MAX_WINDOWS` of
    them; a last one shorter than half a window joins the one before), each with its
    throughput, queue growth and level (module docstring); `floor`: the requests waiting that
    make a queue. Counted in one pass per column over every window's points."""
    length = (end - start) / WINDOWS if window_s is None else max(
        window_s * US_PER_S, (end - start) / MAX_WINDOWS)
    edges = np.append(np.arange(start, end, length, dtype=float), float(end))
    if len(edges) > 2 and edges[-1] - edges[-2] < length / 2:
        edges = np.delete(edges, -2)
    grid = np.concatenate([np.linspace(low, high, POINTS)
                           for low, high in pairwise(edges)])
    waiting = (timeline.by("arrived", grid) - timeline.by("left", grid)).astype(float)
    arrived, completed = timeline.by("arrived", edges), timeline.by("completed", edges)
    out = []
    for i, (low, high) in enumerate(pairwise(edges)):
        seconds = (high - low) / US_PER_S
        points = slice(i * POINTS, (i + 1) * POINTS)
        growth = float(np.polyfit(grid[points] / US_PER_S, waiting[points], 1)[0])
        offered = float(arrived[i + 1] - arrived[i]) / seconds
        at_end = int(waiting[points][-1])
        level = (OVERLOADED if growth > GROWTH_SHARE * offered and growth > 0
                 and at_end >= floor else BACKLOGGED if at_end >= floor else STABLE)
        out.append({"span_s": [low / US_PER_S, high / US_PER_S], "level": level,
                    "offered_rate_per_s": offered,
                    "served_rate_per_s": float(completed[i + 1] - completed[i]) / seconds,
                    "queue_growth_per_s": growth, "waiting_at_end": at_end})
    return out


def stretches(verdict: dict[str, Any], level: str) -> list[list[dict[str, Any]]]:
    """The verdict's consecutive windows at `level`, stretch by stretch."""
    found: list[list[dict[str, Any]]] = []
    previous = None
    for window in verdict.get("windows", ()):
        if window["level"] == level:
            if previous != level:
                found.append([])
            found[-1].append(window)
        previous = window["level"]
    return found


def spans(verdict: dict[str, Any], level: str) -> str:
    """Where the run was at `level`: "12-18 s, 30-36 s" ("" if nowhere)."""
    return ", ".join(f"{s[0]['span_s'][0]:.4g}-{s[-1]['span_s'][1]:.4g} s"
                     for s in stretches(verdict, level))


def overloads(verdict: dict[str, Any]) -> list[Anomaly]:
    """One `overload` anomaly per stretch of consecutive OVERLOADED windows, from the first's
    start to the last's end; its severity is the largest share of the offered rate the queue
    grew by in the stretch (capped at 1)."""
    found = []
    for stretch in stretches(verdict, OVERLOADED):
        first, last = stretch[0], stretch[-1]
        growth = max(w["queue_growth_per_s"] for w in stretch)
        share = max(w["queue_growth_per_s"] / max(w["offered_rate_per_s"], 1e-9)
                    for w in stretch)
        found.append(Anomaly(
            "overload", round(first["span_s"][0] * US_PER_S), "", (),
            f"the wait queue grew by up to {growth:.3g} req/s (offered "
            f"{first['offered_rate_per_s']:.3g} to {last['offered_rate_per_s']:.3g} req/s), "
            f"{last['waiting_at_end']} waiting at t={last['span_s'][1]:.4g} s",
            round(last["span_s"][1] * US_PER_S), float(min(1.0, share))))
    return found


@dataclass(frozen=True, slots=True)
class StepSums:
    """Exact sums over a run's engine steps for the fit of their cost, c0 + c1 x prefill
    tokens + c2 x decoding requests: the normal equations' entries (durations in µs); the KV
    blocks in use and the requests in the batch, summed over the steps (the KV a running
    request holds, measured); and the smallest KV pool (blocks) of an instance that stepped."""

    count: int = 0
    new: int = 0
    decodes: int = 0
    new_new: int = 0
    new_decodes: int = 0
    decodes_decodes: int = 0
    duration: int = 0
    new_duration: int = 0
    decodes_duration: int = 0
    kv_used: int = 0
    batch: int = 0
    kv_blocks: int | None = None

    @classmethod
    def of(cls, new: np.ndarray, decodes: np.ndarray, duration: np.ndarray,
           kv_used: np.ndarray, batch: np.ndarray, kv_blocks: int | None) -> StepSums:
        n, d, t = (a.astype(np.int64) for a in (new, decodes, duration))
        return cls(len(n), int(n.sum()), int(d.sum()), dot(n, n), dot(n, d), dot(d, d),
                   int(t.sum()), dot(n, t), dot(d, t), int(kv_used.astype(np.int64).sum()),
                   int(batch.astype(np.int64).sum()), kv_blocks)

    def __add__(self, other: StepSums) -> StepSums:
        blocks = [b for b in (self.kv_blocks, other.kv_blocks) if b is not None]
        return StepSums(
            self.count + other.count, self.new + other.new, self.decodes + other.decodes,
            self.new_new + other.new_new, self.new_decodes + other.new_decodes,
            self.decodes_decodes + other.decodes_decodes, self.duration + other.duration,
            self.new_duration + other.new_duration,
            self.decodes_duration + other.decodes_duration, self.kv_used + other.kv_used,
            self.batch + other.batch, min(blocks) if blocks else None)

    def fit(self) -> tuple[float, float, float] | None:
        """The least-squares c0, c1, c2 (s), solved exactly; None when the steps do not
        tell them apart (say, every step either prefilled or decoded one request)."""
        a = [[self.count, self.new, self.decodes], [self.new, self.new_new, self.new_decodes],
             [self.decodes, self.new_decodes, self.decodes_decodes]]
        b = [self.duration, self.new_duration, self.decodes_duration]
        solved = solve3([[Fraction(v) for v in row] for row in a], [Fraction(v) for v in b])
        if solved is None:
            return None
        c0, c1, c2 = (float(c / US_PER_S) for c in solved)
        return c0, c1, c2


def solve3(a: list[list[Fraction]], b: list[Fraction]) -> list[Fraction] | None:
    """a x = b by Gaussian elimination in exact arithmetic; None when a is singular."""
    rows = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(3):
        pivot = next((r for r in range(col, 3) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(3):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [rows[i][3] / rows[i][i] for i in range(3)]


@dataclass(frozen=True, slots=True)
class Started:
    """The requests that entered service: how many, their uncached prompt tokens, their
    output tokens (requested), the output tokens they were served (sums; fewer than
    requested when clients timed out or the run ended first) and their preemptions."""

    count: int = 0
    uncached: int = 0
    output: int = 0
    emitted: int = 0
    preempted: int = 0

    @classmethod
    def of(cls, req: RequestColumns) -> Started:
        started = req.first_scheduled >= 0
        cached = np.maximum(req.cached_tokens[started], 0)
        return cls(int(started.sum()), int((req.input_len[started] - cached).sum()),
                   int(req.output_len[started].sum()),
                   int(np.maximum(req.emitted[started], 0).sum()),
                   int(req.preemptions[started].sum()))

    def __add__(self, other: Started) -> Started:
        return Started(self.count + other.count, self.uncached + other.uncached,
                       self.output + other.output, self.emitted + other.emitted,
                       self.preempted + other.preempted)


def step_sums(instances: tuple[InstanceRecord, ...]) -> StepSums:
    stepped = [i for i in instances if len(i.start)]
    if not stepped:
        return StepSums()
    return StepSums.of(np.concatenate([i.new_tokens for i in stepped]),
                       np.concatenate([i.decodes for i in stepped]),
                       np.concatenate([i.duration for i in stepped]),
                       np.concatenate([i.kv_used for i in stepped]),
                       np.concatenate([i.batch_size for i in stepped]),
                       min(i.kv_total for i in stepped))


def capacity(scenario: Scenario, roles: list[Role], steps: StepSums, started: Started
             ) -> tuple[float | None, str]:
    """The highest sustainable rate from this run's step costs, with how it was estimated.

    Step times are c0 + c1 x prefill tokens + c2 x decoding requests: the blackbox model's own
    coefficients, or for the other models a linear fit over the steps this run took (an
    approximation, which underestimates the cost of larger batches at light load). At the
    highest sustainable rate X per replica, with P prefill tokens and D decode tokens per
    request on average (measured here, prefix-cache hits and recomputation included; D scaled
    to the output tokens requested where fewer were served, when clients timed out), batches
    are as large as the engine allows, B = min(max_running_requests, KV tokens / (uncached
    prompt + output / 2)), or, when the run preempted (its pool filled), KV tokens / the KV a
    running request held on average over its steps, where that is more (shared prefixes
    cached beside the batch, block rounding: search-routing's model read 74 % above the rate
    its 5 replicas measured at saturation, 3 % below it sized so), and the token budget T
    caps each step: a second of work holds
    X x max(D / B, (P + D) / T) steps, so X = 1 / (c0 max(D / B, (P + D) / T) + c1 P + c2 D).
    Balanced routing is assumed."""
    fleet = fleet_of(scenario, roles)
    if isinstance(fleet, str):
        return None, fleet
    replicas, engine, beta = fleet
    if steps.count == 0 or started.count == 0:
        return None, "no request was served"
    if beta is not None:
        (c0, c1, c2), source = (b / US_PER_S for b in beta[:3]), "the blackbox coefficients"
    else:
        if steps.count < 10:
            return None, "too few engine steps to fit their cost"
        fitted = steps.fit()
        if fitted is None:
            return None, "the step times do not tell c0, c1 and c2 apart"
        (c0, c1, c2), source = fitted, "step costs fitted on this run's steps"
        if min(c0, c1, c2) < 0:
            return None, "the step times do not fit c0 + c1 x prefill tokens + c2 x decodes"
    count = started.count
    # The decode work offered, not what was served before clients left: the decode steps
    # per output token served, times the output tokens requested.
    cut = started.output / started.emitted if 0 < started.emitted < started.output else 1
    prefill, decode = steps.new / count, steps.decodes / count * cut
    footprint = max(1.0, started.uncached / count + started.output / count / 2)
    assert steps.kv_blocks is not None
    kv_tokens = steps.kv_blocks * engine.block_size
    held = steps.kv_used / steps.batch * engine.block_size if steps.batch else 0.0
    measured = started.preempted > 0 and held > footprint
    if measured:  # the pool filled: what a running request held, shared prefixes and all
        footprint = held
    batch = max(1.0, min(engine.max_running_requests, kv_tokens / footprint))
    steps_per_request = max(decode / batch, (prefill + decode) / engine.max_scheduled_tokens)
    cost = c0 * steps_per_request + c1 * prefill + c2 * decode
    if cost <= 0:
        return None, "the requests took no engine time"
    per_replica = 1.0 / cost
    return float(replicas * per_replica), (
        f"step-cost model: {per_replica:.3g} req/s per replica x {replicas} ({source}; "
        + (f"the KV a running request held, {held:.0f} tokens, measured: the run preempted "
           f"{started.preempted} times; " if measured else "") + "balanced routing assumed)")


def fleet_of(scenario: Scenario, roles: list[Role]
             ) -> tuple[int, EngineConfig, list[float] | None] | str:
    """The replicas the estimate scales to (an autoscaled pool: its maximum), their engine
    and, for the blackbox model, its beta coefficients; or why there is no estimate."""
    if any(role is not Role.MONOLITHIC for role in roles):
        return "P/D disaggregation: the pools' capacities are in summary.json pd"
    section = scenario.deployment
    if section is None:
        return scenario.cluster.instances, scenario.engine, blackbox_beta(scenario,
                                                                          scenario.latency)
    configs = section.configs()
    if len(configs) != 1:
        return "several deployment configs: their capacities differ"
    _, config = configs[0]
    engine = scenario.engine if config.engine is None else load(EngineConfig, config.engine,
                                                                "engine")
    latency = scenario.latency if config.latency is None else load(LatencyConfig,
                                                                   config.latency, "latency")
    replicas = config.replicas.max if section.autoscaler is not None else config.replicas.start
    return replicas, engine, blackbox_beta(scenario, latency)


def blackbox_beta(scenario: Scenario, latency: LatencyConfig) -> list[float] | None:
    """The beta coefficients when `latency` runs the blackbox model. A deployment config's
    section is unresolved: a type left out runs what `latency_type` picks (physical in native
    mode unless alpha or beta are given)."""
    kind = latency_type(dataclasses.replace(scenario, latency=latency))
    return latency.beta if kind == "blackbox" else None


def run_saturation(records: Records, window: Window, scenario: Scenario) -> dict[str, Any]:
    """The verdict of a run held in memory."""
    return saturation(Timelines.of(records, window), window,
                      lambda: capacity(scenario, [i.role for i in records.instances],
                                       step_sums(records.instances),
                                       Started.of(records.requests)),
                      scenario.evaluation.saturation.window_s)
