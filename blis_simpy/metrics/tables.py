"""A finished run's summary and tables, computed once, from its records, in the reporting
conventions chosen for the run (`conventions.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from blis_simpy.core.records import InstanceRecord, Records, RequestColumns
from blis_simpy.core.request import RejectCode, State
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.columns import Coded, Column, Table
from blis_simpy.metrics.conventions import Conventions, RequestLatencies
from blis_simpy.metrics.gaps import token_gaps
from blis_simpy.metrics.kv_tiers import tier_levels, tier_summary
from blis_simpy.metrics.serving import serving_benchmark
from blis_simpy.metrics.summary import summary_fields
from blis_simpy.metrics.window import Window

if TYPE_CHECKING:
    import pandas as pd


def summary(records: Records, lat: RequestLatencies, conventions: Conventions,
            horizon_us: int | None, window: Window) -> dict[str, Any]:
    """The cluster summary; with several instances, each one's summary under `instances`."""
    everyone = list(range(len(records.instances)))
    out = scope_summary(records, lat, conventions, everyone, "cluster", horizon_us, window)
    if len(everyone) > 1:
        out["instances"] = [scope_summary(records, lat, conventions, [i],
                                          records.instances[i].id, horizon_us, window)
                            for i in everyone]
    return out


def scope_summary(records: Records, lat: RequestLatencies, conventions: Conventions,
                  members: list[int], instance_id: str, horizon_us: int | None,
                  window: Window) -> dict[str, Any]:
    """Summary over the requests routed to `members` (positions in `records.instances`; the
    cluster also counts requests rejected before routing) that arrived within the window;
    its rates count what completed within it (metrics/window.py)."""
    req = records.requests
    instances = [records.instances[i] for i in members]
    whole = len(members) == len(records.instances)
    where = req.instance_index
    routed_here = np.isin(where, members) | (whole & (where < 0))
    chosen = routed_here & window.arrived(req.arrival)
    finished = chosen & req.in_state(State.COMPLETED)
    queued = int((chosen & req.in_state(State.QUEUED)).sum())
    running = int((chosen & req.in_state(State.RUNNING)).sum())
    rejected = int((chosen & req.in_state(State.REJECTED)).sum())
    completed = int(finished.sum())
    gaps = token_gaps(req, finished, records.instances)
    ended = max(i.last_event for i in instances)
    ended = ended if horizon_us is None else min(ended, horizon_us)
    e2e, ttft, delay = lat.e2e[chosen], lat.ttft[chosen], lat.scheduling_delay[chosen]
    output_tokens = conventions.output_tokens(req, chosen)
    served = served_tokens = None
    if not window.whole:  # rates: what happened within the window, whoever it was for
        served = int((routed_here & window.within(req.completed_at)).sum())
        served_tokens = window.tokens(req, routed_here, ended)
    out = summary_fields(
        instance_id=instance_id,
        completed=completed,
        still_queued=queued,
        still_running=running,
        injected=conventions.injected(int(chosen.sum()), rejected, completed, queued, running),
        input_tokens=int(req.input_len[chosen & (req.queued_at >= 0)].sum()),
        output_tokens=output_tokens,
        duration_us=window.stop(ended) - window.start,
        e2e=e2e[e2e >= 0],
        ttft=ttft[ttft >= 0],
        itl=conventions.itl(gaps, req, finished, records.instances),
        scheduling_delay=delay[delay >= 0],
        preemptions=int(req.preemptions[chosen].sum()),
        kv_allocation_failures=sum(i.kv_failures for i in instances),
        served=served,
        served_tokens=served_tokens,
    )
    out["cache_hit_rate"] = conventions.hit_rate(instances) if window.whole else \
        window.hit_rate(req, chosen)
    if whole:
        out["serving_benchmark"] = serving_benchmark(req, finished, gaps, records.instances,
                                                     out["vllm_estimated_duration_s"])
    tiers = tier_summary(instances)
    if tiers is not None:
        out["kv_tiers"] = tiers
    out.update(outcome_counts(req, chosen, whole))
    return out


def outcome_counts(req: RequestColumns, chosen: np.ndarray, whole: bool) -> dict[str, Any]:
    """Where the requests went: every arrival is admitted or rejected by admission; every
    admitted one is completed, rejected by an instance, or still in the system at the end.
    Rejections by stable code (`reject_code` in the requests table)."""
    codes = [c for c, keep in zip(req.reject_code, chosen, strict=True) if keep and c]
    by_code = {code: codes.count(code) for code in sorted(set(codes))}
    out: dict[str, Any] = {}
    if whole:
        arrived = int(chosen.sum())
        out["arrived_requests"] = arrived
        out["admitted_requests"] = arrived - by_code.get(RejectCode.ADMISSION, 0)
    out["rejected_requests"] = len(codes)
    out["rejected_by_reason"] = by_code
    out["timed_out_requests"] = int((chosen & req.in_state(State.TIMED_OUT)).sum())
    return out


def ms(values: np.ndarray) -> np.ndarray:
    """µs -> ms, NaN where the value is missing (-1)."""
    return np.where(values >= 0, values / US_PER_MS, np.nan)


def seconds(values: np.ndarray) -> np.ndarray:
    return np.where(values >= 0, values / US_PER_S, np.nan)


def request_table(req: RequestColumns, lat: RequestLatencies) -> Table:
    """One row per request that arrived, in arrival order."""
    return Table({
        "id": req.id,
        "arrival_s": seconds(req.arrival),
        "admitted_s": seconds(req.admitted_at),
        "routed_s": seconds(req.routed_at),
        "queued_s": seconds(req.queued_at),
        "scheduled_s": seconds(req.first_scheduled),
        "first_token_s": seconds(req.first_token_at),
        "completion_s": seconds(req.completed_at),
        "timed_out_s": seconds(req.timed_out_at),
        "ttft_ms": ms(lat.ttft),
        "e2e_ms": ms(lat.e2e),
        "itl_mean_ms": np.where(lat.e2e >= 0, lat.itl_mean / US_PER_MS, np.nan),
        "scheduling_delay_ms": ms(lat.scheduling_delay),
        "input_tokens": req.input_len,
        "output_tokens": req.output_len,
        "cached_tokens": np.maximum(req.cached_tokens, 0),
        "generated_tokens": req.emitted,
        "preemptions": req.preemptions,
        "instance": req.instance,
        "tenant": req.tenant,
        "slo_class": req.slo_class,
        "model": req.model,
        "request_type": req.request_type,
        "session": req.session,
        "turn": req.turn,
        "final_state": req.state,
        "reject_code": req.reject_code,
        "reject_reason": req.reject_reason,
    })


def each_step(instances: Sequence[InstanceRecord], column: Any) -> np.ndarray:
    """`column(instance)` of every instance, one after the other."""
    return np.concatenate([column(inst) for inst in instances])


def instance_ids(instances: Sequence[InstanceRecord]) -> Coded:
    """Each step's instance id, instance after instance."""
    return Coded([inst.id for inst in instances],
                 np.repeat(np.arange(len(instances)), [len(inst.start) for inst in instances]))


def step_table(records: Records) -> Table:
    """One row per engine step and instance."""
    insts = records.instances
    return Table({
        "instance": instance_ids(insts),
        "step": each_step(insts, lambda i: np.arange(len(i.start))),
        "start_s": each_step(insts, lambda i: i.start / US_PER_S),
        "duration_ms": each_step(insts, lambda i: i.duration / US_PER_MS),
        "prefill_tokens": each_step(insts, lambda i: i.new_tokens),
        "decode_requests": each_step(insts, lambda i: i.decodes),
        "batch_size": each_step(insts, lambda i: i.batch_size),
        "kv_blocks_used": each_step(insts, lambda i: i.kv_used),
        "queue_depth": each_step(insts, lambda i: i.queue_depth),
    })


def instance_series(records: Records) -> Table:
    """Each instance's levels at every step start: queue depth, batch size, KV use."""
    # Steps in time order, same-time steps by instance id: the instances taken in id order
    # (stable: equal ids keep the fleet's), a stable sort on time leaves ties in that order.
    insts = sorted(records.instances, key=lambda i: i.id)
    time_s = each_step(insts, lambda i: i.start / US_PER_S)
    order = np.argsort(time_s, kind="stable")
    table: dict[str, Column] = {
        "instance": instance_ids(insts)[order],
        "time_s": time_s[order],
        "queue_depth": each_step(insts, lambda i: i.queue_depth)[order],
        "batch_size": each_step(insts, lambda i: i.batch_size)[order],
        "kv_utilization": each_step(insts, lambda i: i.kv_used / (i.kv_total or 1))[order],
        "busy_s": each_step(insts, lambda i: i.duration / US_PER_S)[order],
    }
    if any(i.role is not Role.MONOLITHIC for i in insts):  # P/D: each instance's role
        roles = np.array([str(i.role) for i in insts for _ in range(len(i.start))], object)
        table["role"] = roles[order].tolist()
    if any(i.tiers is not None for i in insts):  # the KV tiers' use (none: columns absent)
        table["kv_cpu_utilization"] = each_step(insts, lambda i: tier_levels(i)[0])[order]
        table["kv_storage_utilization"] = each_step(insts, lambda i: tier_levels(i)[1])[order]
    return Table(table)


def group_table(requests: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per value of `column` (tenant, slo_class, instance): request counts by outcome
    and TTFT / E2E / ITL statistics in ms over its completed requests."""
    import pandas as pd

    rows = []
    for key, frame in requests.groupby(column, sort=True):
        done = frame[frame.final_state == "completed"]
        row: dict[str, Any] = {column: key, "requests": len(frame), "completed": len(done),
                               "rejected": int((frame.final_state == "rejected").sum()),
                               "timed_out": int((frame.final_state == "timed_out").sum())}
        for metric in ("ttft_ms", "e2e_ms", "itl_mean_ms"):
            values = done[metric].dropna()
            name = metric.removesuffix("_ms")
            row[f"{name}_mean_ms"] = values.mean() if len(values) else np.nan
            for p in (50, 90, 99):
                row[f"{name}_p{p}_ms"] = values.quantile(p / 100) if len(values) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)
