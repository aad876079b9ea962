"""The saturation verdict: does the system keep up with the load it is offered, and how much
more could it take?

Over the measured arrivals (the window's start to its last arrival):
* `offered_rate_per_s`: requests arriving per second; `served_rate_per_s`: requests completing
  per second in the same span (below the offered rate at the start of any run, while the first
  requests are still being served; far below it, and falling, when the system cannot keep up);
* `queue_growth_per_s`: the least-squares slope of the number of requests waiting to be served
  (arrived, not yet scheduled on an instance, not rejected or timed out) over the second half
  of the span. Continuous batching absorbs load into the running batch, so in a system that
  keeps up this stays near zero; past capacity (batch slots, KV blocks or the token budget
  exhausted) it grows by the excess rate;
* the verdict: `saturated` when the waiting queue grew by more than `GROWTH_SHARE` of the
  offered rate and at least `MIN_WAITING` requests (and 1 % of the arrivals) wait at the end;
  `sustainable` otherwise; `undetermined` with fewer than `MIN_ARRIVALS` arrivals;
* `max_sustainable_rate_per_s`, the highest request rate the system would sustain with this
  request mix (the queue starts to grow beyond it; latency targets may allow less), estimated:
  when saturated, as measured: the rate at which requests entered service while the queue
  grew (the servers were as busy as they get); otherwise from the step costs of this run
  (`capacity`, also reported on its own as `capacity_model_per_s`: the whole fleet, evenly
  loaded; a saturated run whose model capacity exceeds the offered rate was saturated by
  uneven routing, not by too few instances);
* `load_factor` = offered / max sustainable, and `headroom` = 1 - load factor: the share of
  the sustainable rate still unused (negative when overloaded). This is what to read for
  capacity, not `utilization`: an engine with continuous batching runs a step whenever
  anything is in its batch, so its busy fraction is close to 1 at almost any load.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blis_simpy.config.scenario import EngineConfig, LatencyConfig, Scenario
from blis_simpy.core.records import InstanceRecord, Records
from blis_simpy.core.request import State
from blis_simpy.core.schema import load
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.window import Window

GROWTH_SHARE = 0.02  # queue growth above this share of the offered rate ...
MIN_WAITING = 10  # ... with at least this many requests (and 1 % of arrivals) waiting at the end
MIN_ARRIVALS = 30  # fewer measured arrivals: no verdict
GRID = 200  # points the waiting count is sampled at over the second half


def saturation(records: Records, window: Window, scenario: Scenario) -> dict[str, Any]:
    """The verdict and its evidence (module docstring), for summary.json `saturation`."""
    req = records.requests
    measured = window.arrived(req.arrival)
    arrivals = np.sort(req.arrival[measured])
    start = window.start
    out: dict[str, Any] = {"verdict": "undetermined"}
    if len(arrivals) < MIN_ARRIVALS or arrivals[-1] <= start:
        out["reason"] = (f"only {len(arrivals)} requests arrived in the measurement window "
                         f"(a verdict needs {MIN_ARRIVALS})")
        return out
    end = int(arrivals[-1])
    seconds = (end - start) / US_PER_S
    offered = len(arrivals) / seconds
    completed = req.completed_at
    served = int(((completed >= start) & (completed <= end)).sum()) / seconds
    left = leaving_times(records)
    middle = start + (end - start) // 2
    grid = np.linspace(middle, end, GRID)
    waiting = waiting_at(req.arrival, left, grid)
    growth = float(np.polyfit(grid / US_PER_S, waiting, 1)[0])
    at_end = int(waiting[-1])
    saturated = (growth > GROWTH_SHARE * offered
                 and at_end >= max(MIN_WAITING, 0.01 * len(arrivals)))
    out = {"verdict": "saturated" if saturated else "sustainable",
           "span_s": [start / US_PER_S, end / US_PER_S],
           "offered_rate_per_s": offered, "served_rate_per_s": served,
           "queue_growth_per_s": growth, "waiting_at_end": at_end}
    model, how = capacity(records, scenario)
    best, method = model, "step-cost model"
    if saturated:
        first = req.first_scheduled
        entered = int(((first >= middle) & (first <= end)).sum())
        best = entered / ((end - middle) / US_PER_S) if end > middle else None
        method = ("measured: the rate requests entered service while the queue grew "
                  "(second half of the span)")
    out["max_sustainable_rate_per_s"] = best
    out["max_sustainable_method"] = method
    out["capacity_model_per_s"] = model
    out["capacity_model"] = how
    out["load_factor"] = offered / best if best else None
    out["headroom"] = 1 - offered / best if best else None
    return out


def leaving_times(records: Records) -> np.ndarray:
    """When each request stopped waiting to be served: its first scheduling, else its
    rejection or timeout; -1 if it never did (still waiting when the run ended)."""
    req = records.requests
    rejected = {name: time for time, _, name in records.rejections}
    left = np.where(req.first_scheduled >= 0, req.first_scheduled, req.timed_out_at)
    for i in np.flatnonzero((left < 0) & req.in_state(State.REJECTED)):
        left[i] = rejected.get(req.id[i], req.arrival[i])
    return left


def waiting_at(arrival: np.ndarray, left: np.ndarray, times: np.ndarray) -> np.ndarray:
    """How many requests had arrived and not yet left the waiting state at each time."""
    arrived = np.searchsorted(np.sort(arrival), times, side="right")
    gone = np.searchsorted(np.sort(left[left >= 0]), times, side="right")
    return (arrived - gone).astype(float)


def capacity(records: Records, scenario: Scenario) -> tuple[float | None, str]:
    """The highest sustainable rate from this run's step costs, with how it was estimated.

    Step times are c0 + c1 x prefill tokens + c2 x decoding requests: the blackbox model's own
    coefficients, or for the other models a linear fit over the steps this run took (an
    approximation, which underestimates the cost of larger batches at light load). At the
    highest sustainable rate X per replica, with P prefill tokens and D decode tokens per
    request on average (measured here, prefix-cache hits and recomputation included), batches
    are as large as the engine allows, B = min(max_running_requests, KV tokens / (uncached
    prompt + output / 2)), and the token budget T caps each step: a second of work holds
    X x max(D / B, (P + D) / T) steps, so X = 1 / (c0 max(D / B, (P + D) / T) + c1 P + c2 D).
    Balanced routing is assumed."""
    fleet = fleet_of(scenario, records.instances)
    if isinstance(fleet, str):
        return None, fleet
    replicas, engine, beta = fleet
    steps = [i for i in records.instances if len(i.start)]
    req = records.requests
    started = req.first_scheduled >= 0
    if len(steps) == 0 or not started.any():
        return None, "no request was served"
    new = np.concatenate([i.new_tokens for i in steps]).astype(float)
    decodes = np.concatenate([i.decodes for i in steps]).astype(float)
    if beta is not None:
        (c0, c1, c2), source = (b / US_PER_S for b in beta[:3]), "the blackbox coefficients"
    else:
        if len(new) < 10:
            return None, "too few engine steps to fit their cost"
        duration = np.concatenate([i.duration for i in steps]).astype(float) / US_PER_S
        design = np.column_stack([np.ones_like(new), new, decodes])
        (c0, c1, c2), *_ = np.linalg.lstsq(design, duration, rcond=None)
        source = "step costs fitted on this run's steps"
        if min(c0, c1, c2) < 0:
            return None, "the step times do not fit c0 + c1 x prefill tokens + c2 x decodes"
    count = int(started.sum())
    prefill, decode = new.sum() / count, decodes.sum() / count
    uncached = (req.input_len[started] - np.maximum(req.cached_tokens[started], 0)).mean()
    footprint = max(1.0, uncached + req.output_len[started].mean() / 2)
    kv_tokens = min(i.kv_total for i in steps) * engine.block_size
    batch = max(1.0, min(engine.max_running_requests, kv_tokens / footprint))
    steps_per_request = max(decode / batch, (prefill + decode) / engine.max_scheduled_tokens)
    per_replica = 1.0 / (c0 * steps_per_request + c1 * prefill + c2 * decode)
    return float(replicas * per_replica), (f"step-cost model: {per_replica:.3g} req/s per "
                                           f"replica x {replicas} ({source}; balanced routing "
                                           "assumed)")


def fleet_of(scenario: Scenario, instances: tuple[InstanceRecord, ...]
             ) -> tuple[int, EngineConfig, list[float] | None] | str:
    """The replicas the estimate scales to (an autoscaled pool: its maximum), their engine
    and, for the blackbox model, its beta coefficients; or why there is no estimate."""
    if any(i.role is not Role.MONOLITHIC for i in instances):
        return "P/D disaggregation: the pools' capacities are in summary.json pd"
    section = scenario.deployment
    if section is None:
        latency = scenario.latency
        return (scenario.cluster.instances, scenario.engine,
                latency.beta if latency.type == "blackbox" else None)
    configs = section.configs()
    if len(configs) != 1:
        return "several deployment configs: their capacities differ"
    _, config = configs[0]
    engine = scenario.engine if config.engine is None else load(EngineConfig, config.engine,
                                                                "engine")
    latency = scenario.latency if config.latency is None else load(LatencyConfig,
                                                                   config.latency, "latency")
    replicas = config.replicas.max if section.autoscaler is not None else config.replicas.start
    return replicas, engine, latency.beta if latency.type == "blackbox" else None
