"""The reference's output files, byte for byte: printed metrics and --results-path JSON."""

from __future__ import annotations

from typing import Any

from blis_simpy.compat import gojson
from blis_simpy.metrics.report import RequestLatencies

SUMMARY_ONLY = ("rejected_requests", "cache_hit_rate", "instances")


def reference_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """Our summary without the fields the reference does not print."""
    return {k: v for k, v in summary.items() if k not in SUMMARY_ONLY}


def stdout_text(summary: dict[str, Any]) -> str:
    """What the reference prints on stdout for a run: one metrics block per instance (when
    there are several) and one for the cluster, each only if something completed there."""
    text = ""
    for block in [*summary.get("instances", []), summary]:
        if block["completed_requests"] > 0:
            text += ("=== Simulation Metrics ===\n" + gojson.dumps(reference_summary(block))
                     + "\n")
    if summary["completed_requests"] == 0:
        return text
    completed = summary["completed_requests"]
    preemption_rate = summary["preemption_count"] / completed
    hit_rate = summary["cache_hit_rate"]
    if preemption_rate or hit_rate:
        text += ("=== KV Cache Metrics ===\n"
                 f"Preemption Rate: {preemption_rate:.4f}\n"
                 f"Cache Hit Rate: {hit_rate:.4f}\n"
                 "KV Thrashing Rate: 0.0000\n")
    return text


def results_json(summary: dict[str, Any], lat: RequestLatencies, instance_names: list[str]
                 ) -> str:
    """The reference's --results-path file: the summary plus one row per injected request.

    Per-request itl_ms and scheduling_delay_ms hold µs, as the reference writes them (Q10)."""
    rows = []
    for i, req in enumerate(lat.requests):
        if req.instance < 0 or req.reject_reason:
            continue
        rows.append({
            "arrived_at": req.arrival / 1e6,
            "requestID": req.name,
            "num_prefill_tokens": req.input_len,
            "num_decode_tokens": req.output_len,
            "ttft_ms": max(int(lat.ttft[i]), 0) / 1000,
            "itl_ms": float(lat.itl_mean[i]),
            "e2e_ms": max(int(lat.e2e[i]), 0) / 1000,
            "scheduling_delay_ms": max(int(lat.scheduling_delay[i]), 0),
            "handled_by": instance_names[req.instance],
        })
    rows.sort(key=lambda row: (row["arrived_at"], row["requestID"]))
    return gojson.dumps({**reference_summary(summary), "requests": rows}) + "\n"
