"""Turn a finished simulation into its summary and tables, once, at the end.

Two conventions share one engine:
* native: every latency is what a client would measure. TTFT = first token - arrival, E2E = last
  token - arrival, inter-token latency = gap between consecutive tokens; every generated token
  counts once.
* compat (`compat: blis`): the reference's reporting (engine.md §9): the output delay a2 is added
  to every ITL sample, each request gets one extra ITL sample (its last step + a2) that E2E also
  counts (Q3), output tokens exclude each request's first token (Q9), injected requests miss
  those still inside their queueing delay, and per-request ITL and scheduling delay are µs in
  fields named _ms (Q10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from blis_simpy.engine.instance import Instance
from blis_simpy.engine.request import Request, State
from blis_simpy.engine.simulation import Simulation
from blis_simpy.metrics.collect import StepTable, completed, token_gaps
from blis_simpy.metrics.summary import summary_fields


@dataclass(frozen=True, slots=True)
class RequestLatencies:
    """Per-request latencies (µs) in the chosen convention, aligned with `requests`."""

    requests: list[Request]
    ttft: np.ndarray  # -1 where no first token
    e2e: np.ndarray  # -1 where not completed
    itl_mean: np.ndarray  # float; 0 where not completed or fewer than 2 tokens
    scheduling_delay: np.ndarray  # -1 where never scheduled


def column(requests: list[Request], attr: str) -> np.ndarray:
    return np.fromiter((getattr(r, attr) for r in requests), dtype=np.int64,
                       count=len(requests))


def latencies(sim: Simulation, steps: list[StepTable], compat: bool) -> RequestLatencies:
    reqs = sim.requests
    arrival = column(reqs, "arrival")
    first = column(reqs, "first_token_at")
    done_at = column(reqs, "completed_at")
    out = column(reqs, "output_len")
    ttft = np.where(first >= 0, first - arrival, -1)
    done = done_at >= 0
    span = done_at - first  # first token to last token
    if compat:
        a2 = sim.instances[0].latency.output_delay
        last_step = np.array([steps[r.instance].duration[r.last_emit_step] if d else 0
                              for r, d in zip(reqs, done, strict=True)], dtype=np.int64)
        itl_sum = span + np.maximum(out, 1) * a2 + last_step
        e2e = np.where(done, ttft + itl_sum, -1)
        itl_mean = np.where(done & (out > 0), itl_sum / np.maximum(out - 1, 1), 0.0)
    else:
        e2e = np.where(done, done_at - arrival, -1)
        itl_mean = np.where(done & (out > 1), span / np.maximum(out - 1, 1), 0.0)
    scheduled = column(reqs, "first_scheduled")
    delay = np.where(scheduled >= 0, scheduled - arrival, -1)
    return RequestLatencies(reqs, ttft, e2e, itl_mean, delay)


def summary(sim: Simulation, steps: list[StepTable], lat: RequestLatencies, compat: bool
            ) -> dict[str, Any]:
    """The cluster summary; with several instances, each one's summary under `instances`."""
    everyone = list(range(len(sim.instances)))
    out = scope_summary(sim, steps, lat, compat, everyone, "cluster")
    if len(everyone) > 1:
        out["instances"] = [scope_summary(sim, steps, lat, compat, [i], sim.instances[i].name)
                            for i in everyone]
    return out


def scope_summary(sim: Simulation, steps: list[StepTable], lat: RequestLatencies, compat: bool,
                  members: list[int], instance_id: str) -> dict[str, Any]:
    """Summary over the requests routed to `members` (the cluster also counts requests
    rejected before routing)."""
    whole = len(members) == len(sim.instances)
    chosen = set(members)
    mask = np.fromiter(((r.instance in chosen) or (whole and r.instance < 0)
                        for r in sim.requests), dtype=bool, count=len(sim.requests))
    reqs = [r for r, keep in zip(sim.requests, mask, strict=True) if keep]
    instances = [sim.instances[i] for i in members]
    finished = completed(reqs)
    gaps = token_gaps(finished, steps)
    queued = sum(len(i.wait_queue) for i in instances)
    running = sum(len(i.running) for i in instances)
    rejected = sum(1 for r in reqs if r.state is State.REJECTED)
    if compat:
        a2 = instances[0].latency.output_delay
        extra = np.array([steps[r.instance].duration[r.last_emit_step] for r in finished],
                         dtype=np.int64)
        itl = gaps.samples(steps, a2, more=extra + a2)
        output_tokens = sum(max(r.emitted - 1, 0) for r in reqs)
        injected = len(finished) + queued + running
    else:
        itl = gaps.samples(steps)
        output_tokens = sum(r.emitted for r in reqs)
        injected = len(reqs) - rejected
    horizon = sim.scenario.horizon_us
    ended = max(i.last_event for i in instances)
    e2e, ttft, delay = lat.e2e[mask], lat.ttft[mask], lat.scheduling_delay[mask]
    out = summary_fields(
        instance_id=instance_id,
        completed=len(finished),
        still_queued=queued,
        still_running=running,
        injected=injected,
        input_tokens=sum(i.input_tokens for i in instances),
        output_tokens=output_tokens,
        duration_us=ended if horizon is None else min(ended, horizon),
        e2e=e2e[e2e >= 0],
        ttft=ttft[ttft >= 0],
        itl=itl,
        scheduling_delay=delay[delay >= 0],
        preemptions=sum(i.preemptions for i in instances),
    )
    out["rejected_requests"] = rejected
    out["cache_hit_rate"] = hit_rate(instances, compat)
    return out


def hit_rate(instances: list[Instance], compat: bool) -> float:
    """Prefix-cache hits over lookups; the reference averages the instances' rates."""
    if compat:
        return sum(i.kv.hit_rate for i in instances) / len(instances)
    hits = sum(i.kv.hits for i in instances)
    lookups = hits + sum(i.kv.misses for i in instances)
    return hits / lookups if lookups else 0.0


def ms(values: np.ndarray) -> np.ndarray:
    """µs -> ms, NaN where the value is missing (-1)."""
    return np.where(values >= 0, values / 1000, np.nan)


def seconds(values: np.ndarray) -> np.ndarray:
    return np.where(values >= 0, values / 1e6, np.nan)


def request_table(sim: Simulation, lat: RequestLatencies) -> pd.DataFrame:
    reqs = sim.requests
    names = [i.name for i in sim.instances]
    return pd.DataFrame({
        "id": [r.name for r in reqs],
        "arrival_s": seconds(column(reqs, "arrival")),
        "queued_s": seconds(column(reqs, "queued_at")),
        "scheduled_s": seconds(column(reqs, "first_scheduled")),
        "first_token_s": seconds(column(reqs, "first_token_at")),
        "completion_s": seconds(column(reqs, "completed_at")),
        "ttft_ms": ms(lat.ttft),
        "e2e_ms": ms(lat.e2e),
        "itl_mean_ms": np.where(lat.e2e >= 0, lat.itl_mean / 1000, np.nan),
        "scheduling_delay_ms": ms(lat.scheduling_delay),
        "input_tokens": column(reqs, "input_len"),
        "output_tokens": column(reqs, "output_len"),
        "cached_tokens": np.maximum(column(reqs, "cached_tokens"), 0),
        "generated_tokens": column(reqs, "emitted"),
        "preemptions": column(reqs, "preemptions"),
        "instance": [names[r.instance] if r.instance >= 0 else "" for r in reqs],
        "tenant": [r.tenant_id for r in reqs],
        "slo_class": [r.slo_class for r in reqs],
        "request_type": [r.request_type for r in reqs],
        "session": [r.session_id for r in reqs],
        "turn": column(reqs, "turn"),
        "final_state": [str(r.state) for r in reqs],
        "reject_reason": [r.reject_reason for r in reqs],
    })


def step_table(sim: Simulation, steps: list[StepTable]) -> pd.DataFrame:
    frames = []
    for inst, table in zip(sim.instances, steps, strict=True):
        frames.append(pd.DataFrame({
            "instance": inst.name,
            "step": np.arange(len(table.start)),
            "start_s": table.start / 1e6,
            "duration_ms": table.duration / 1000,
            "prefill_tokens": table.new_tokens,
            "decode_requests": table.decodes,
            "batch_size": table.batch_size,
            "kv_blocks_used": table.kv_used,
            "queue_depth": table.queue_depth,
        }))
    return pd.concat(frames, ignore_index=True)


def decision_table(sim: Simulation) -> pd.DataFrame:
    """Every admission and routing decision, when `cluster.record_decisions` is on."""
    records = sim.gateway.decisions or []
    return pd.DataFrame({
        "time_s": [r[0] / 1e6 for r in records],
        "request": [r[1] for r in records],
        "stage": [r[2] for r in records],
        "outcome": [r[3] for r in records],
        "instance": [r[4] for r in records],
        "reason": [r[5] for r in records],
        "top_candidates": [";".join(f"{name}={score:.6g}" for name, score in r[6])
                           for r in records],
    })
