"""P/D disaggregation metrics (issue 15), computed from the records: the instances' roles and
step rows, the transfers channel, and the requests table.

* per pool (prefill, decode): instances, utilization (busy time / run time, mean over the
  pool's instances), prefill and decode tokens per second, requests completed there;
* transfers: count, bytes, duration (link start to end) and wait for decode KV room
  (asked to reserved) distributions, link queue depth (handed-off requests whose transfer has
  not started: asked to start, or to the drop) over time, its peak and time-weighted mean;
* the pools' imbalance (prefill utilization / decode utilization: above 1, prefill is the
  bottleneck; null when the decode pool never ran), the disaggregated fraction (handoffs /
  requests routed), handoffs dropped or abandoned, by reason.

Goodput at the TTFT/TPOT targets is the run's own (`metrics.json` `goodput_per_s`: requests
completed within their SLO class's targets per second), the same figure for a monolithic run.

Each request is counted once: in the requests table by its final state, in the per-pool
completions by the instance it completed on, in the transfers by one row per handoff.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blis_simpy.core.records import TRANSFER_FIELDS, Records
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.raw import distribution

POOLS = (Role.PREFILL, Role.DECODE)


def disaggregated(records: Records) -> bool:
    """Whether the run had P/D pools."""
    return any(inst.role in POOLS for inst in records.instances)


def transfer_table(records: Records) -> Table:
    """One row per handoff (transfers.csv): times in s, empty where it did not happen (as in
    requests.csv)."""
    rows = records.transfers
    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in TRANSFER_FIELDS]
    data = dict(zip(TRANSFER_FIELDS, cols, strict=True))
    out: dict[str, Any] = {}
    for name in TRANSFER_FIELDS:
        values = data[name]
        if name in ("asked", "reserved", "start", "end"):
            us = np.array(values, dtype=np.int64)
            out[f"{name}_s"] = np.where(us < 0, np.nan, us / US_PER_S)
        elif name in ("blocks", "bytes"):
            out[name] = np.array(values, dtype=np.int64)
        else:
            out[name] = list(values)
    return Table(out)


def queue_depth(records: Records) -> tuple[np.ndarray, np.ndarray]:
    """(times µs, depth after each change) of the handoffs waiting for the link to start:
    from the prefill's end until their transfer starts, or until they are dropped."""
    changes = []
    for row in records.transfers:
        asked, start, end = row[4], row[6], row[7]
        changes.append((asked, 1))
        changes.append((start if start >= 0 else end, -1))
    changes.sort(key=lambda c: (c[0], -c[1]))  # one that starts as it is asked is counted
    times = np.array([c[0] for c in changes], dtype=np.int64)
    depth = np.cumsum([c[1] for c in changes]).astype(np.int64)
    return times, depth


def queue_depth_table(records: Records) -> Table:
    times, depth = queue_depth(records)
    return Table({"time_s": times / US_PER_S, "waiting_transfers": depth})


def pd_summary(records: Records, requests: Table) -> dict[str, Any]:
    """The summary's `pd` section."""
    span = max(records.ended_at, 1)
    pools: dict[str, Any] = {}
    for role in POOLS:
        members = [inst for inst in records.instances if inst.role is role]
        ids = {inst.id for inst in members}
        busy = [int(inst.duration.sum()) / span for inst in members]
        pools[str(role)] = {
            "instances": len(members),
            "utilization": float(np.mean(busy)) if busy else 0.0,
            "prefill_tokens_per_s": sum(int(i.new_tokens.sum()) for i in members) * US_PER_S
            / span,
            "decode_tokens_per_s": sum(int(i.decodes.sum()) for i in members) * US_PER_S
            / span,
            "completed_requests": int(sum(1 for inst, state in zip(
                requests["instance"], requests["final_state"], strict=True)
                if state == "completed" and inst in ids)),
        }
    rows = records.transfers
    moved = [r for r in rows if r[10] == "transferred"]
    routed = int((np.asarray(requests.array("routed_s")) >= 0).sum())
    times, depth = queue_depth(records)
    dropped: dict[str, int] = {}
    for r in rows:
        if r[10] != "transferred":
            dropped[r[11]] = dropped.get(r[11], 0) + 1
    decode_busy = pools["decode"]["utilization"]
    out: dict[str, Any] = {
        "pools": pools,
        "pool_imbalance": pools["prefill"]["utilization"] / decode_busy if decode_busy
        else None,
        "disaggregated_fraction": len(rows) / routed if routed else 0.0,
        "transfers": len(moved),
        "transfer_bytes": int(sum(r[9] for r in moved)),
        **distribution("transfer", np.array([(r[7] - r[6]) / 1000 for r in moved], float)),
        **distribution("kv_room_wait", np.array([(r[5] - r[4]) / 1000 for r in rows
                                                 if r[5] >= 0], float)),
        "transfer_queue_peak": int(depth.max()) if len(depth) else 0,
        "transfer_queue_mean": time_weighted(times, depth, span),
        "handoffs_dropped": dropped,
    }
    return out


def time_weighted(times: np.ndarray, depth: np.ndarray, span: int) -> float:
    """Mean of a level that is 0 before `times[0]` and `depth[i]` from `times[i]` on."""
    if not len(times):
        return 0.0
    ends = np.append(times[1:], max(span, int(times[-1])))
    return float((depth * (ends - times)).sum() / span)
