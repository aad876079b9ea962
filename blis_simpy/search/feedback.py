"""The text a search framework's reflection step reads about one run: what the policy achieved
and what went wrong, in a few lines, from the Result's summary, anomalies and warnings."""

from __future__ import annotations

from blis_simpy.sim.result import Result


def feedback(result: Result) -> str:
    """A short report of one run for LLM reflection (GEPA's reflective dataset, OpenEvolve's
    artifacts)."""
    s = result.summary
    lines = [
        f"completed {s['completed_requests']} of {s['arrived_requests']} requests "
        f"({s['rejected_requests']} rejected, {s['timed_out_requests']} timed out, "
        f"{s['still_queued'] + s['still_running']} unfinished)",
        f"TTFT mean {s['ttft_mean_ms']:.1f} ms, p99 {s['ttft_p99_ms']:.1f} ms; E2E mean "
        f"{s['e2e_mean_ms']:.1f} ms, p99 {s['e2e_p99_ms']:.1f} ms",
        f"throughput {s['tokens_per_sec']:.0f} tokens/s; prefix-cache hit rate "
        f"{s['cache_hit_rate']:.2f}; {s['preemption_count']} preemptions",
    ]
    if result.evaluation is not None and result.evaluation.weights:
        objectives = ", ".join(f"{k} {v:.3g}" for k, v in result.evaluation.objectives.items())
        lines.append(f"fitness {result.evaluation.fitness:.4g} ({objectives})")
    anomalies = result.metrics.get("anomalies", {})
    if anomalies:
        lines.append("anomalies: " + ", ".join(f"{k} x{v}" for k, v in anomalies.items()))
    lines.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(lines)
