"""A run as a Chrome trace-event JSON file (`trace.json`), which the Perfetto UI
(ui.perfetto.dev) and chrome://tracing open: one process per instance with its engine steps as
slices (batch size and tokens as args) and counters for queue depth, batch size and KV blocks
used; each request as an async slice on the instance that served it (queued, prefill, decode
nested inside); routing decisions and anomalies as instant events on a `gateway` process.

Format: the Trace Event Format's JSON object form, `{"traceEvents": [...]}`, times in µs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.columns import Table

GATEWAY_PID = 0
STEPS_TID, REQUESTS_TID = 1, 2


def us(seconds: float) -> int:
    return round(seconds * US_PER_S)


def perfetto_json(instances: Sequence[str], requests: Table, steps: Table, anomalies: Table,
                  decisions: Table | None) -> str:
    """The trace-event JSON text of a finished run's tables; `instances` in fleet order (one
    track each, idle ones included)."""
    pid = {name: n + 1 for n, name in enumerate(instances)}
    events: list[dict[str, Any]] = [meta("process_name", GATEWAY_PID, 0, {"name": "gateway"}),
                                    meta("thread_name", GATEWAY_PID, 1, {"name": "routing"}),
                                    meta("thread_name", GATEWAY_PID, 2, {"name": "anomalies"})]
    for name, p in pid.items():
        events += [meta("process_name", p, 0, {"name": name}),
                   meta("process_sort_index", p, 0, {"sort_index": p}),
                   meta("thread_name", p, STEPS_TID, {"name": "steps"}),
                   meta("thread_name", p, REQUESTS_TID, {"name": "requests"})]
    events += step_events(steps, pid)
    events += request_events(requests, pid)
    if decisions is not None:
        events += routing_events(decisions)
    events += anomaly_events(anomalies, pid)
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"},
                      separators=(",", ":"), allow_nan=False) + "\n"


def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def step_events(steps: Table, pid: dict[str, int]) -> list[dict[str, Any]]:
    out = []
    start, duration = steps.array("start_s"), steps.array("duration_ms")
    columns = {name: steps.array(name) for name in ("prefill_tokens", "decode_requests",
                                                    "batch_size", "kv_blocks_used",
                                                    "queue_depth")}
    for i, name in enumerate(steps["instance"]):
        p, ts = pid[name], us(float(start[i]))
        args = {k: int(v[i]) for k, v in columns.items()}
        out.append({"ph": "X", "name": "step", "cat": "step", "pid": p, "tid": STEPS_TID,
                    "ts": ts, "dur": round(float(duration[i]) * US_PER_MS), "args": args})
        out.append({"ph": "C", "name": "load", "pid": p, "ts": ts,
                    "args": {"queue_depth": args["queue_depth"],
                             "batch_size": args["batch_size"]}})
        out.append({"ph": "C", "name": "kv_blocks_used", "pid": p, "ts": ts,
                    "args": {"blocks": args["kv_blocks_used"]}})
    return out


def request_events(requests: Table, pid: dict[str, int]) -> list[dict[str, Any]]:
    """Each routed request: an async slice from arrival to its end, with its phases nested
    (waiting from arrival to first scheduled, prefill to the first token, decode to the end)."""
    out = []
    cols = {name: requests.array(name) for name in (
        "arrival_s", "scheduled_s", "first_token_s", "completion_s", "timed_out_s")}
    for i, (rid, where) in enumerate(zip(requests["id"], requests["instance"], strict=True)):
        if not where:
            continue
        arrival, sched, first, done, gave_up = (float(cols[c][i]) for c in cols)
        end = done if not math.isnan(done) else gave_up
        if math.isnan(end):  # unfinished at the horizon: ends with its last known phase
            end = max(t for t in (arrival, sched, first) if not math.isnan(t))
        common = {"cat": "request", "id": str(rid), "pid": pid[where], "tid": REQUESTS_TID}
        args = {"tenant": str(requests["tenant"][i]), "slo_class": str(requests["slo_class"][i]),
                "input_tokens": int(requests["input_tokens"][i]),
                "cached_tokens": int(requests["cached_tokens"][i]),
                "final_state": str(requests["final_state"][i])}
        phases = [("waiting", arrival, sched), ("prefill", sched, first), ("decode", first, end)]
        out.append({**common, "ph": "b", "name": str(rid), "ts": us(arrival), "args": args})
        for name, a, b in phases:
            if not (math.isnan(a) or math.isnan(b)) and b >= a:
                out.append({**common, "ph": "b", "name": name, "ts": us(a)})
                out.append({**common, "ph": "e", "name": name, "ts": us(b)})
        out.append({**common, "ph": "e", "name": str(rid), "ts": us(end)})
    return out


def routing_events(decisions: Table) -> list[dict[str, Any]]:
    out = []
    time_s, regret = decisions.array("time_s"), decisions.array("ttft_regret_ms")
    for i, stage in enumerate(decisions["stage"]):
        if stage != "routing":
            continue
        args: dict[str, Any] = {"request": str(decisions["request"][i]),
                "chosen": str(decisions["instance"][i]),
                "reason": str(decisions["reason"][i]),
                "candidates": str(decisions["top_candidates"][i])}
        if not np.isnan(regret[i]):
            args["ttft_regret_ms"] = float(regret[i])
        out.append({"ph": "i", "s": "p", "name": "route", "cat": "routing",
                    "pid": GATEWAY_PID, "tid": 1, "ts": us(float(time_s[i])), "args": args})
    return out


def anomaly_events(anomalies: Table, pid: dict[str, int]) -> list[dict[str, Any]]:
    out = []
    time_s, severity = anomalies.array("time_s"), anomalies.array("severity")
    for i, kind in enumerate(anomalies["type"]):
        where = str(anomalies["instance"][i])
        out.append({"ph": "i", "s": "p", "name": str(kind), "cat": "anomaly",
                    "pid": pid.get(where, GATEWAY_PID), "tid": 1 if where else 2,
                    "ts": us(float(time_s[i])),
                    "args": {"requests": str(anomalies["requests"][i]),
                             "detail": str(anomalies["detail"][i]),
                             "severity": float(severity[i])}})
    return out
