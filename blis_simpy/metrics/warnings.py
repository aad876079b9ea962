"""Warnings about a run that is valid but degenerate: it ran, and says what went wrong.

They are computed from the summary and the records like every metric, listed in
`summary.json` under `warnings`, and printed on stderr by the command line. The fitness
already reflects them (metrics/fitness.py: scaled by the completion rate).
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TenantsWorkload, TraceWorkload
from blis_simpy.core.request import RejectCode
from blis_simpy.core.units import MAX_ADMISSION_DELAYS, MAX_REQUESTS
from blis_simpy.metrics.saturation import OVERLOADED, STABLE, spans, spread_capacity

LOW_COMPLETION = 0.5  # below this completed fraction a run is called out
FEW_REQUESTS = 20  # below this many measured requests a percentile or a rate is vacuous


def run_warnings(summary: dict[str, Any], tenants: Set[str], classes: Set[str],
                 scenario: Scenario, simulated: int) -> list[str]:
    """Every degenerate condition the run shows, most fundamental first; `tenants` and
    `classes`: those of the requests; `simulated`: the requests the whole run simulated (the
    summary counts those of the measurement window)."""
    arrived = summary["arrived_requests"]
    window = scenario.evaluation.window
    if arrived == 0:
        if simulated:
            return [f"the measurement window ({span(window.warmup_s, window.end_s)}) holds none "
                    f"of the {simulated} requests simulated: every latency, rate and count "
                    "describes nothing (evaluation.window)"]
        return ["no request arrived (an empty trace, or a horizon before the first arrival): "
                "nothing was simulated"]
    out = []
    completed, rejected = summary["completed_requests"], summary["rejected_requests"]
    by_reason = summary["rejected_by_reason"]
    if rejected == arrived:
        reasons = ", ".join(f"{n} {code}" for code, n in by_reason.items())
        out.append(f"every request was rejected ({reasons})")
    elif completed == 0:
        timed_out, queued = summary["timed_out_requests"], summary["still_queued"]
        running = summary["still_running"]
        elsewhere = arrived - rejected - timed_out - queued - running
        before = (f", {elsewhere} not yet in an instance's queue (in an admission delay, "
                  "routing or a transfer)") if elsewhere > 0 else ""
        out.append(f"no request completed ({arrived} arrived, {rejected} rejected, "
                   f"{timed_out} timed out, {queued} still queued and {running} still running "
                   f"at the end{before})")
    elif completed < LOW_COMPLETION * arrived:
        out.append(f"only {completed} of {arrived} arrived requests completed "
                   f"({completed / arrived:.0%}); the fitness is scaled by that fraction")
    verdict = summary.get("saturation", {})
    if verdict.get("verdict") == "saturated":
        out.append(saturated(verdict))
    elif spans(verdict, OVERLOADED):
        last = verdict["windows"][-1]
        after = ("and caught up later: latencies mix the overload with the calm"
                 if last["level"] == STABLE else
                 ("and was still overloaded" if last["level"] == OVERLOADED else
                  "and had not caught up") +
                 f" at the span's end ({last['waiting_at_end']} waiting at "
                 f"t={last['span_s'][1]:.4g} s): latencies mix the overload with the calm")
        out.append(f"overloaded at {spans(verdict, OVERLOADED)} (the saturation detector's "
                   f"windows: the wait queue grew there) {after}")
    elif "batch" in verdict:
        out.append(f"{verdict['reason']}: no load verdict; latencies describe draining one "
                   "batch, not serving a steady rate")
    bias = verdict.get("warmup")
    if bias:
        early, (low, high) = bias["early_ttft_p90_ms"], bias["later_ttft_p90_ms"]
        out.append(f"warm-up biased: the requests that arrived in the span's first tenth "
                   f"({bias['span_s'][0]:.4g}-{bias['span_s'][1]:.4g} s) had a TTFT p90 "
                   f"of {early:.3g} ms against {low:.3g}-{high:.3g} ms in each later tenth, "
                   "at the same offered rate: the system started empty (small batches, cold "
                   "caches); skip it with evaluation.window.warmup_s to measure the steady "
                   "state")
    too_big = by_reason.get(RejectCode.KV_CAPACITY, 0)
    if too_big:
        out.append(f"{too_big} requests need more tokens than an instance's whole KV pool "
                   f"holds (engine.kv_blocks x engine.block_size) and were rejected")
    too_long = by_reason.get(RejectCode.MAX_MODEL_LEN, 0)
    if too_long:
        limit = scenario.engine.max_model_len
        out.append(f"{too_long} requests need more tokens (prompt + output) than "
                   "engine.max_model_len" + ("" if limit is None else f" ({limit})") +
                   " allows and were rejected: a configuration or workload mismatch, not a "
                   "lack of capacity")
    never_admitted = by_reason.get(RejectCode.ADMISSION_DELAYS, 0)
    if never_admitted:
        out.append(f"{never_admitted} requests were delayed by admission {MAX_ADMISSION_DELAYS:,} "
                   "times (or past the simulated clock's limit) without being admitted, and "
                   "were rejected (admission_delay_limit): the admission policy never lets "
                   "them in")
    timed_out = summary["timed_out_requests"]
    if timed_out:
        out.append(f"{timed_out} of {arrived} requests timed out: their clients gave up "
                   "(workload timeout_s) before the last token arrived")
    workload = scenario.workload
    if isinstance(workload, TenantsWorkload) and workload.max_requests is None \
            and arrived >= MAX_REQUESTS:
        out.append(f"the workload stopped at the limit of {MAX_REQUESTS:,} requests "
                   "(closed-loop users): later ones were never sent")
    out.extend(silent_tenants(tenants, scenario))
    out.extend(unknown_acceptance_tenants(tenants, scenario))
    out.extend(targetless_classes(classes, scenario))
    if arrived < FEW_REQUESTS:
        where = "" if window.warmup_s == 0 and window.end_s is None else \
            f" in the measurement window ({span(window.warmup_s, window.end_s)})"
        out.append(f"only {arrived} request{'' if arrived == 1 else 's'} measured{where}: "
                   f"percentiles and rates from fewer than {FEW_REQUESTS} describe little "
                   "(a p99 of so few is their maximum)")
    return out


def span(start_s: float, end_s: float | None) -> str:
    return f"from {start_s:g} s to " + ("the run's end" if end_s is None else f"{end_s:g} s")


def unknown_acceptance_tenants(sent: Set[str], scenario: Scenario) -> list[str]:
    """A trace names its tenants in its rows, so engine.speculative.tenant_acceptance can only
    be checked against them once read (a tenants workload's are checked before the run)."""
    speculative = scenario.engine.speculative
    if speculative is None or not isinstance(scenario.workload, TraceWorkload):
        return []
    return [f"engine.speculative.tenant_acceptance names {tenant!r}, which no request of the "
            f"trace has (its tenants: {', '.join(sorted(map(repr, sent)))}): that rate was "
            "never used" for tenant in speculative.tenant_acceptance if tenant not in sent]


def saturated(verdict: dict[str, Any]) -> str:
    """The saturation verdict in one sentence (summary.json `saturation` has the figures)."""
    best = verdict["max_sustainable_rate_per_s"]
    if "unserved" in verdict:
        return (f"saturated: offered {verdict['offered_rate_per_s']:.3g} req/s, served "
                f"{verdict['served_rate_per_s']:.3g} req/s; {verdict['unserved']}; about "
                f"{best:.3g} req/s sustainable "
                f"({verdict['max_sustainable_method'].split(' (')[0]}); "
                "latencies describe only the requests served")
    spread = spread_capacity(verdict)
    uneven = (f", but the instances could carry about {spread:.3g} req/s with the load "
              "spread evenly: routing concentrated it" if spread else "")
    return (f"saturated: offered {verdict['offered_rate_per_s']:.3g} req/s, served "
            f"{verdict['served_rate_per_s']:.3g} req/s; the wait queue grew by "
            f"{verdict['queue_growth_per_s']:.3g} req/s ({verdict['waiting_at_end']} waiting at "
            f"t={verdict['span_s'][1]:.4g} s), so latencies describe a growing queue, not a "
            f"steady state; about {best:.3g} req/s was sustained" + uneven
            if "reason" not in verdict else
            f"saturated: offered {verdict['offered_rate_per_s']:.3g} req/s, served "
            f"{verdict['served_rate_per_s']:.3g} req/s; {verdict['reason']}: the step-cost "
            f"model allows about {best:.3g} req/s, so latencies describe the start of an "
            "overload, not a steady state")


def targetless_classes(carried: Set[str], scenario: Scenario) -> list[str]:
    """SLO targets of classes no request carried (`carried`: the requests' classes, "" for
    none): attainment never applies them, and a search weighting it would score 0 with no
    word (finalcheck 20: `slo_targets: {standard: ...}` on a workload whose requests have no
    class, which is "default")."""
    named = sorted(c for c in scenario.evaluation.slo_targets
                   if ("" if c == "default" else c) not in carried)
    if not named:
        return []
    have = ", ".join(repr(c or "default") for c in sorted(carried)) or "none"
    return [f"evaluation.slo_targets names SLO classes no request carried: "
            f"{', '.join(map(repr, named))} (the requests' classes: {have}; a request without "
            "a class is 'default'): those targets were never applied"]


def silent_tenants(sent: Set[str], scenario: Scenario) -> list[str]:
    """The configured tenants that sent nothing (`sent`: the tenants of the requests)."""
    workload = scenario.workload
    if not isinstance(workload, TenantsWorkload):
        return []
    out = [f"tenant {t.id!r} sent no request within the run" for t in workload.tenants
           if t.id not in sent]
    total = workload.open_fraction_total
    if total > 0 and abs(total - 1.0) > 1e-9:
        out.append(f"the open-loop tenants' rate_fraction values sum to {total:g}, not 1: each "
                   f"tenant sent its fraction / {total:g} of rate_per_s")
    return out
