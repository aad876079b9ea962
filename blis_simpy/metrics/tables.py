"""A finished run's summary and tables, computed once, from its records, in the reporting
conventions chosen for the run (`conventions.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from blis_simpy.core.records import InstanceRecord, Records, RequestColumns
from blis_simpy.core.request import RejectCode, State
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.columns import Coded, Column, Table
from blis_simpy.metrics.conventions import Conventions, RequestLatencies
from blis_simpy.metrics.gaps import duration_orders, token_gaps
from blis_simpy.metrics.kv_tiers import tier_levels, tier_summary
from blis_simpy.metrics.serving import ServingFigures, serving_benchmark, serving_figures
from blis_simpy.metrics.summary import Samples, summary_fields
from blis_simpy.metrics.window import Window

if TYPE_CHECKING:
    import pandas as pd


def summary(records: Records, lat: RequestLatencies, conventions: Conventions,
            horizon_us: int | None, window: Window) -> dict[str, Any]:
    """The cluster summary; with several instances, each one's summary under `instances`."""
    orders = duration_orders(records.instances)  # sorted once for every scope's gaps
    return scoped_summary(records.instances, horizon_us, conventions, window,
                          lambda members: scope_figures(records, lat, conventions, members,
                                                        window, horizon_us, orders))


def scoped_summary(instances: Sequence[InstanceRecord], horizon_us: int | None,
                   conventions: Conventions, window: Window,
                   figures: Callable[[list[int]], ScopeFigures]) -> dict[str, Any]:
    """The cluster's summary and, with several instances, each one's, from the figures of
    the requests routed to a set of instances (positions in `instances`)."""
    everyone = list(range(len(instances)))
    out = scope_summary(figures(everyone), instances, conventions, "cluster", horizon_us,
                        window)
    if len(everyone) > 1:
        out["instances"] = [scope_summary(figures([i]), [instances[i]], conventions,
                                          instances[i].id, horizon_us, window)
                            for i in everyone]
    return out


def scope_end(instances: Sequence[InstanceRecord], horizon_us: int | None) -> int:
    """When a scope's part of the run ended: its last event, at most the horizon."""
    ended = max(i.last_event for i in instances)
    return ended if horizon_us is None else min(ended, horizon_us)


@dataclass(frozen=True, slots=True)
class ScopeFigures:
    """What a scope's summary is made of: the requests routed to its instances (the cluster
    also counts requests rejected before routing) that arrived within the measurement window,
    counted and their latencies as samples; what happened within the window (a window that
    is not the whole run: for its rates); and, for the cluster, vLLM's metrics' figures."""

    whole: bool  # the cluster
    arrived: int
    completed: int
    queued: int
    running: int
    rejected: int
    timed_out: int
    input_tokens: int
    output_tokens: int
    preemptions: int
    reject_codes: dict[str, int]  # rejections by code, codes in order
    e2e: Samples
    ttft: Samples
    itl: Samples
    scheduling_delay: Samples
    cached_tokens: int  # of the scheduled requests' prompt tokens (`prompt_tokens`)
    prompt_tokens: int
    served: int | None  # completed within the window, whenever they arrived
    served_tokens: float | None  # output tokens emitted within the window
    serving: ServingFigures | None


def scope_figures(records: Records, lat: RequestLatencies, conventions: Conventions,
                  members: list[int], window: Window, horizon_us: int | None,
                  orders: list[np.ndarray] | None = None) -> ScopeFigures:
    """The figures of the requests routed to `members` (positions in `records.instances`);
    `orders`: each instance's steps by duration (`gaps.duration_orders`), if known."""
    req = records.requests
    whole = len(members) == len(records.instances)
    where = req.instance_index
    routed_here = np.isin(where, members) | (whole & (where < 0))
    chosen = routed_here & window.arrived(req.arrival)
    finished = chosen & req.in_state(State.COMPLETED)
    gaps = token_gaps(req, finished, records.instances, orders)
    e2e, delay = lat.e2e[chosen], lat.scheduling_delay[chosen]
    ttft = lat.ttft[conventions.ttft_population(chosen, finished)]
    itl = conventions.itl(gaps, req, finished, records.instances)
    # the chosen rows' codes, read by position: a scope of one instance (most of them)
    # visits its own rows only, not every row of the run
    codes = list(filter(None, map(req.reject_code.__getitem__, np.flatnonzero(chosen).tolist())))
    scheduled = chosen & (req.cached_tokens >= 0)
    served = served_tokens = None
    if not window.whole:  # rates: what happened within the window, whoever it was for
        served = int((routed_here & window.within(req.completed_at)).sum())
        served_tokens = window.tokens(req, routed_here, scope_end(
            [records.instances[i] for i in members], horizon_us))
    return ScopeFigures(
        whole=whole,
        arrived=int(chosen.sum()),
        completed=int(finished.sum()),
        queued=int((chosen & req.in_state(State.QUEUED)).sum()),
        running=int((chosen & np.isin(req.state_array, conventions.in_service)).sum()),
        rejected=int((chosen & req.in_state(State.REJECTED)).sum()),
        timed_out=int((chosen & req.in_state(State.TIMED_OUT)).sum()),
        input_tokens=int(req.input_len[chosen & (req.queued_at >= 0)].sum()),
        output_tokens=conventions.output_tokens(req, chosen),
        preemptions=int(req.preemptions[chosen].sum()),
        reject_codes={code: codes.count(code) for code in sorted(set(codes))},
        e2e=Samples(e2e[e2e >= 0]),
        ttft=Samples(ttft[ttft >= 0]),
        itl=itl,
        scheduling_delay=Samples(delay[delay >= 0]),
        cached_tokens=int(req.cached_tokens[scheduled].sum()),
        prompt_tokens=int(req.input_len[scheduled].sum()),
        served=served,
        served_tokens=served_tokens,
        serving=serving_figures(req, finished, gaps, records.instances,
                                conventions.client_itl(itl)) if whole else None,
    )


def scope_summary(fig: ScopeFigures, instances: Sequence[InstanceRecord],
                  conventions: Conventions, instance_id: str, horizon_us: int | None,
                  window: Window) -> dict[str, Any]:
    """One scope's summary: the reference's fields over the measurement window, the cache
    hit rate, vLLM's metrics (the cluster), the KV tiers' use and where the requests went."""
    out = summary_fields(
        instance_id=instance_id,
        completed=fig.completed,
        still_queued=fig.queued,
        still_running=fig.running,
        injected=conventions.injected(fig.arrived, fig.rejected, fig.completed, fig.queued,
                                      fig.running),
        input_tokens=fig.input_tokens,
        output_tokens=fig.output_tokens,
        duration_us=window.stop(scope_end(instances, horizon_us)) - window.start,
        e2e=fig.e2e,
        ttft=fig.ttft,
        itl=fig.itl,
        scheduling_delay=fig.scheduling_delay,
        preemptions=fig.preemptions,
        kv_allocation_failures=sum(i.kv_failures for i in instances),
        served=fig.served,
        served_tokens=fig.served_tokens,
    )
    out["cache_hit_rate"] = conventions.hit_rate(instances, fig.cached_tokens,
                                                 fig.prompt_tokens)
    if fig.serving is not None:
        out["serving_benchmark"] = serving_benchmark(fig.serving,
                                                     out["vllm_estimated_duration_s"])
    tiers = tier_summary(instances)
    if tiers is not None:
        out["kv_tiers"] = tiers
    out.update(outcome_counts(fig))
    return out


def outcome_counts(fig: ScopeFigures) -> dict[str, Any]:
    """Where the requests went: every arrival is admitted or rejected by admission; every
    admitted one is completed, rejected by an instance, or still in the system at the end.
    Rejections by stable code (`reject_code` in the requests table)."""
    by_code = fig.reject_codes
    out: dict[str, Any] = {}
    if fig.whole:
        out["arrived_requests"] = fig.arrived
        out["admitted_requests"] = fig.arrived - by_code.get(RejectCode.ADMISSION, 0) \
            - by_code.get(RejectCode.ADMISSION_DELAYS, 0)  # delayed, never admitted
    out["rejected_requests"] = sum(by_code.values())
    out["rejected_by_reason"] = by_code
    out["timed_out_requests"] = fig.timed_out
    return out


def ms(values: np.ndarray) -> np.ndarray:
    """µs -> ms, NaN where the value is missing (-1)."""
    return np.where(values >= 0, values / US_PER_MS, np.nan)


def seconds(values: np.ndarray) -> np.ndarray:
    return np.where(values >= 0, values / US_PER_S, np.nan)


# The tables' text columns (the rest are numbers): read back from CSV as text, an empty cell
# as an empty string.
TEXT_COLUMNS = frozenset(("id", "instance", "tenant", "slo_class", "model", "request_type",
                          "session", "final_state", "reject_code", "reject_reason", "role"))


def request_table(req: RequestColumns, lat: RequestLatencies, trace_times: bool = False
                  ) -> Table:
    """One row per request that arrived, in arrival order; `trace_times`: with each
    published trace row's own timestamp (`trace_time_ns`, as the file gives it)."""
    table = Table({
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
    if trace_times:
        table.columns["trace_time_ns"] = req.trace_time
    return table


def each_step(instances: Sequence[InstanceRecord], column: Any) -> np.ndarray:
    """`column(instance)` of every instance, one after the other."""
    return np.concatenate([column(inst) for inst in instances])


def instance_ids(instances: Sequence[InstanceRecord]) -> Coded:
    """Each step's instance id, instance after instance."""
    return Coded([inst.id for inst in instances],
                 np.repeat(np.arange(len(instances)), [len(inst.start) for inst in instances]))


def step_table(records: Records) -> Table:
    """One row per engine step and instance."""
    return steps_of(records.instances)


def steps_of(insts: Sequence[InstanceRecord], first: Sequence[int] | None = None) -> Table:
    """The step rows of `insts`, instance after instance; `first`: each one's first step
    number (a streaming run's later rows), else 0."""
    starts = first or [0] * len(insts)
    return Table({
        "instance": instance_ids(insts),
        "step": np.concatenate([np.arange(start, start + len(inst.start))
                                for start, inst in zip(starts, insts, strict=True)]),
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
    start = each_step(insts, lambda i: i.start)
    order = np.argsort(start / US_PER_S, kind="stable")
    table = series_columns(instance_ids(insts)[order], start[order],
                           each_step(insts, lambda i: i.queue_depth)[order],
                           each_step(insts, lambda i: i.batch_size)[order],
                           each_step(insts, lambda i: i.kv_used)[order],
                           each_step(insts, lambda i: np.full(len(i.start), i.kv_total or 1)
                                     )[order],
                           each_step(insts, lambda i: i.duration)[order])
    if any(i.role is not Role.MONOLITHIC for i in insts):  # P/D: each instance's role
        roles = np.array([str(i.role) for i in insts for _ in range(len(i.start))], object)
        table["role"] = roles[order].tolist()
    if any(i.tiers is not None for i in insts):  # the KV tiers' use (none: columns absent)
        table["kv_cpu_utilization"] = each_step(insts, lambda i: tier_levels(i)[0])[order]
        table["kv_storage_utilization"] = each_step(insts, lambda i: tier_levels(i)[1])[order]
    return Table(table)


def series_columns(instance: Column, start: np.ndarray, queue_depth: np.ndarray,
                   batch_size: np.ndarray, kv_used: np.ndarray, kv_total: np.ndarray,
                   duration: np.ndarray) -> dict[str, Column]:
    """The instances table's columns, one row per step (in the order given)."""
    return {"instance": instance, "time_s": start / US_PER_S, "queue_depth": queue_depth,
            "batch_size": batch_size, "kv_utilization": kv_used / kv_total,
            "busy_s": duration / US_PER_S}


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
