"""Anomalies (seed D.8, design §10): each occurrence with its time, instance and requests.

The engine records the ones it sees while running (priority inversions, head-of-line blocking,
SLO-class inversions, KV head-of-line blocking: `blis_simpy.engine.anomalies`); the ones judged
from the records at the end (SLO violations, preemption storms, rejection bursts) are here.
Head-of-line blockings, storms and bursts are episodes with a start and an end; the counts
(`metrics["anomalies"]`) count records, so episodes for those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.config.kv_tiers import KVTiersConfig
from blis_simpy.config.scenario import EvaluationConfig
from blis_simpy.config.workload import SLOTargets
from blis_simpy.core.records import Anomaly, Records
from blis_simpy.core.scale_log import ScaleEvent, ScaleLog
from blis_simpy.core.units import US_PER_S, us
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.faults import failure_anomalies
from blis_simpy.metrics.raw import violated


def bursts(events: Sequence[tuple[Any, ...]], count: int, window_us: int
           ) -> list[tuple[int, int, list[str]]]:
    """Clusters of at least `count` events (time, where, request, ...) within `window_us`:
    (start, end, requests), each event in at most one cluster (scanning forward, greedy)."""
    found = []
    times = [e[0] for e in events]
    i = 0
    while i + count <= len(events):
        if times[i + count - 1] - times[i] < window_us:
            j = i + count
            while j < len(events) and times[j] - times[i] < window_us:
                j += 1
            found.append((times[i], times[j - 1], [e[2] for e in events[i:j]]))
            i = j
        else:
            i += 1
    return found


def overshoot(values: tuple[float, float, float], target: SLOTargets) -> float:
    """The worst relative overshoot of a missed target, capped at 1 (the severity)."""
    worst = 0.0
    for field, value in zip(("ttft_ms", "tpot_ms", "e2e_ms"), values, strict=True):
        goal = getattr(target, field)
        if goal is not None and value > goal:
            worst = max(worst, (value - goal) / goal if goal > 0 else 1.0)
    return min(1.0, worst)


def judged(records: Records, requests: Table, targets: list[SLOTargets | None],
           config: EvaluationConfig, tiers: KVTiersConfig | None = None) -> list[Anomaly]:
    """The anomalies judged from the run's records: SLO violations, preemption storms,
    rejection bursts, (with KV tiers) KV thrashing and (with failures) instance failures."""
    return slo_violations(requests, targets) + episodes(records, config, tiers)


def slo_violations(requests: Table, targets: list[SLOTargets | None]) -> list[Anomaly]:
    """One per completed request that missed a target, when it completed."""
    found = []
    ttft, tpot, e2e = (requests.array(name) for name in ("ttft_ms", "itl_mean_ms", "e2e_ms"))
    completion, states = requests.array("completion_s"), requests["final_state"]
    for i, target in enumerate(targets):
        if target is not None and states[i] == "completed":
            values = (ttft[i], tpot[i], e2e[i])
            missed = violated(values, target)
            if missed:
                at = round(float(completion[i]) * US_PER_S)
                found.append(Anomaly("slo_violation", at, str(requests["instance"][i]),
                                     (str(requests["id"][i]),), "; ".join(missed), at,
                                     overshoot(values, target)))
    return found


def episodes(records: Records, config: EvaluationConfig, tiers: KVTiersConfig | None = None
             ) -> list[Anomaly]:
    """Preemption storms, rejection bursts, (with KV tiers) KV thrashing and (with
    failures) instance failures."""
    found = []
    by_instance: dict[str, list[tuple[int, str, str, int]]] = {}
    for event in records.preemptions:
        by_instance.setdefault(event[1], []).append(event)
    storm, burst = config.preemption_storm, config.rejection_burst
    for name in sorted(by_instance):
        for start, end, reqs in bursts(by_instance[name], storm.count, us(storm.window_s)):
            found.append(Anomaly("preemption_storm", start, name, tuple(reqs),
                                 f"{len(reqs)} preemptions in {(end - start) / US_PER_S:.3f} s",
                                 end))
    for start, end, reqs in bursts(sorted(records.rejections), burst.count,
                                   us(burst.window_s)):
        found.append(Anomaly("rejection_burst", start, "", tuple(reqs),
                             f"{len(reqs)} rejections in {(end - start) / US_PER_S:.3f} s", end))
    if tiers is not None and tiers.enabled:
        found.extend(thrashing(records, tiers))
    if records.faults:
        found.extend(failure_anomalies(records))
    return found


MIN_REVERSALS = 2  # up, down, up (or down, up, down): a flap, not one spike followed


def oscillations(log: ScaleLog) -> list[Anomaly]:
    """`scale_oscillation` episodes (flapping), one config at a time. A reversal (an action
    opposite to the config's previous one) is quick when it comes within the config's
    oscillation window of that previous action: `autoscaler.oscillation_window_s`, else the
    policy's cooldown plus three poll intervals plus the config's mean time-to-ready (a
    replica removed before it could serve, or added back while the last one drains, was paid
    for nothing). An episode is a stretch of actions each within the window of the one
    before, with no slow reversal; it is recorded with `MIN_REVERSALS` quick reversals or
    more, from its first action to its last. Severity: reversals / 10, capped at 1."""
    found = []
    ready = time_to_ready(log)
    for config, (window, add_ready) in log.windows.items():
        if add_ready:
            window += ready.get(config, 0)
        episode: list[ScaleEvent] = []
        reversals = 0
        for event in [e for e in log.events if e.config == config] + [None]:
            last = episode[-1] if episode else None
            near = event is not None and last is not None and event.time - last.time < window
            if near:
                assert event is not None and last is not None
                reversals += event.action != last.action
                episode.append(event)
                continue
            if reversals >= MIN_REVERSALS:
                found.append(flapping(config, episode, reversals, window))
            episode, reversals = ([] if event is None else [event]), 0
    return found


def time_to_ready(log: ScaleLog) -> dict[str, int]:
    """Per config, the mean time (µs) from a replica's provisioning to its taking traffic."""
    started: dict[str, tuple[str, int]] = {}
    waits: dict[str, list[int]] = {}
    for time, instance, config, state in log.lifecycle:
        if state == "provisioning":
            started[instance] = (config, time)
        elif state in ("warming", "active") and instance in started:
            config, begun = started.pop(instance)
            waits.setdefault(config, []).append(time - begun)
    return {config: sum(w) // len(w) for config, w in waits.items()}


def flapping(config: str, episode: list[ScaleEvent], reversals: int, window: int) -> Anomaly:
    ups = sum(1 for e in episode if e.action == "up")
    start, end = episode[0].time, episode[-1].time
    return Anomaly("scale_oscillation", start, "", (),
                   f"{config}: {reversals} reversals in {(end - start) / US_PER_S:.0f} s "
                   f"({ups} up, {len(episode) - ups} down), each action within "
                   f"{window / US_PER_S:.3g} s of the last", end, min(1.0, reversals / 10))


def thrashing(records: Records, config: KVTiersConfig) -> list[Anomaly]:
    """`kv_thrashing` episodes: `thrash_anomaly_count` or more reloads of blocks the GPU
    evicted within `thrash_window_s` before, all within that window, on one instance."""
    found = []
    for inst in records.instances:
        if inst.tiers is None:
            continue
        events = [(t, inst.id, "") for t in inst.tiers.thrashes]
        for start, end, reqs in bursts(events, config.thrash_anomaly_count,
                                       us(config.thrash_window_s)):
            found.append(Anomaly("kv_thrashing", start, inst.id, (), f"{len(reqs)} reloads "
                                 f"of recently evicted blocks in {(end - start) / US_PER_S:.3f}"
                                 " s", end,
                                 min(1.0, len(reqs) / (2 * config.thrash_anomaly_count))))
    return found


def anomaly_table(anomalies: Sequence[Anomaly]) -> Table:
    """One row per anomaly, by start time: an instant has `end_s` = `time_s` and duration 0;
    an episode (head-of-line blocking, a storm, a burst) spans `time_s` to `end_s`."""
    records = sorted(anomalies, key=lambda a: (a.time, a.type, a.instance, a.requests))
    return Table({
        "time_s": [a.time / US_PER_S for a in records],
        "end_s": [a.end / US_PER_S for a in records],
        "duration_s": [(a.end - a.time) / US_PER_S for a in records],
        "type": [a.type for a in records],
        "instance": [a.instance for a in records],
        "requests": [";".join(a.requests) for a in records],
        "detail": [a.detail for a in records],
        "severity": np.array([a.severity for a in records], dtype=float),
    })


def counts(anomalies: Sequence[Anomaly]) -> dict[str, int]:
    """Occurrences per anomaly type, types in name order."""
    out = {kind: 0 for kind in sorted({a.type for a in anomalies})}
    for anomaly in anomalies:
        out[anomaly.type] += 1
    return out
