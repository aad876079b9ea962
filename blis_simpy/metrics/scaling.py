"""Cost and scale metrics of a run with a deployment section (seed D.6, 001 §9), computed from
the ScaleLog's lifecycle and scale-action records and the requests table.

A replica is billed from the moment it starts provisioning (a run's initial replicas: from
t=0) until it terminates, is lost for good (`dead`) or the run ends: replica-seconds x the
config's price per hour / 3600 is its cost. Time-to-ready is from a scale-up's decision (the
replica's provisioning) to the replica taking traffic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blis_simpy.config.arrivals import DiurnalProfile
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import SLOTargets
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.evaluation import request_targets
from blis_simpy.metrics.raw import meets, targeted

SECONDS_PER_HOUR = 3600.0
ROUTABLE = ("warming", "active")
# a replica's life ends when it terminates or is lost for good (`dead`: it never comes back,
# an autoscaler replaces it), so neither is counted, billed or part of the peak after that
ENDED = ("terminated", "dead")


@dataclass(frozen=True, slots=True)
class Life:
    """One replica's span: when it was created, began taking traffic and ended (µs)."""

    instance: str
    config: str
    start: int
    ready: int | None  # None: never took traffic
    end: int  # terminated, or the run's end
    scaled_up: bool  # created by the autoscaler (not one of the initial replicas)


def lives(log: ScaleLog, ended_at: int, warming_routable: bool) -> list[Life]:
    """Every replica's span, in creation order, cut at the run's end."""
    rows: dict[str, list[tuple[int, str, str]]] = {}
    for time, instance, config, state in log.lifecycle:
        rows.setdefault(instance, []).append((time, config, state))
    out = []
    ready_states = ROUTABLE if warming_routable else ("active",)
    for instance, changes in rows.items():
        start, config, first = changes[0]
        ready = next((t for t, _, s in changes if s in ready_states), None)
        end = next((t for t, _, s in changes if s in ENDED), ended_at)
        out.append(Life(instance, config, min(start, ended_at),
                        None if ready is None or ready > ended_at else ready,
                        min(end, ended_at), first == "provisioning"))
    return out


def warming_routable(scenario: Scenario) -> bool:
    """Whether warming replicas take traffic in this scenario."""
    section = scenario.deployment
    return (section is not None and section.autoscaler is not None
            and section.autoscaler.actuation.warming_takes_traffic)


def deployment_summary(log: ScaleLog, ended_at: int, scenario: Scenario, requests: Table
                       ) -> dict[str, Any]:
    """The summary's `deployment` section."""
    return scaling_summary(log, ended_at, warming_routable(scenario), requests,
                           request_targets(scenario, requests), hour_of(scenario))


def hour_of(scenario: Scenario) -> float:
    """The length of a simulated hour (s): a 24th of a diurnal load profile's period (a day
    compressed into minutes has its hours compressed too), else 3,600."""
    profile = getattr(scenario.workload, "load_profile", None)
    return profile.period_s / 24 if isinstance(profile, DiurnalProfile) else SECONDS_PER_HOUR


def scaling_summary(log: ScaleLog, ended_at: int, warming_routable: bool,
                    requests: Table, targets: list[SLOTargets | None],
                    hour_s: float) -> dict[str, Any]:
    """Per config and per model: replica-seconds, cost, replica counts, scale actions,
    time-to-ready, requests and SLO attainment; totals over the deployment, with the SLO
    attainment of each simulated hour (`hour_s` long)."""
    spans = lives(log, ended_at, warming_routable)
    seconds = ended_at / US_PER_S
    good, judged = meets(requests, targets), targeted(targets)
    instance_config = {life.instance: life.config for life in spans}
    served_by = [instance_config.get(i, "") for i in requests["instance"]]
    configs = {}
    for config, (model, price) in log.configs.items():
        mine = [life for life in spans if life.config == config]
        replica_s = sum(life.end - life.start for life in mine) / US_PER_S
        ready_times = [(life.ready - life.start) / US_PER_S for life in mine
                       if life.scaled_up and life.ready is not None]
        events = [e for e in log.events if e.config == config]
        rows = np.fromiter((c == config for c in served_by), dtype=bool, count=len(served_by))
        configs[config] = {
            "model": model,
            "cost_per_replica_hour": price,
            "replica_seconds": replica_s,
            "cost": replica_s * price / SECONDS_PER_HOUR,
            "avg_replicas": replica_s / seconds if seconds > 0 else 0.0,
            "peak_replicas": peak(mine),
            "scale_ups": sum(1 for e in events if e.action == "up"),
            "scale_downs": sum(1 for e in events if e.action == "down"),
            "time_to_ready_mean_s": float(np.mean(ready_times)) if ready_times else None,
            "time_to_ready_max_s": max(ready_times) if ready_times else None,
            "handed_back_requests": sum(1 for _, i, _, _ in log.lost
                                        if instance_config.get(i) == config),
            "lost_tokens": sum(t for _, i, _, t in log.lost if instance_config.get(i) == config),
            **attainment(rows, good, judged),
        }
    models: dict[str, dict[str, Any]] = {}
    for config, stats in configs.items():
        entry = models.setdefault(stats["model"], {"configs": [], "replica_seconds": 0.0,
                                                   "cost": 0.0})
        entry["configs"].append(config)
        entry["replica_seconds"] += stats["replica_seconds"]
        entry["cost"] += stats["cost"]
    for model, entry in models.items():
        rows = np.fromiter((configs[c]["model"] == model if c else False for c in served_by),
                           dtype=bool, count=len(served_by))
        entry.update(attainment(rows, good, judged))
    return {
        "cost": sum(c["cost"] for c in configs.values()),
        "replica_seconds": sum(c["replica_seconds"] for c in configs.values()),
        "avg_replicas": sum(c["avg_replicas"] for c in configs.values()),
        "scale_ups": len([e for e in log.events if e.action == "up"]),
        "scale_downs": len([e for e in log.events if e.action == "down"]),
        "slo_attainment_by_hour": by_hour(requests, good, judged, hour_s),
        "slo_attainment_hour_s": hour_s,
        "configs": configs,
        "models": models,
    }


def attainment(rows: np.ndarray, good: np.ndarray, judged: np.ndarray) -> dict[str, Any]:
    """Requests served and the SLO attainment of those with targets (None without any)."""
    count, mine = int(rows.sum()), rows & judged
    return {"requests": count, "slo_attainment": float(good[mine].mean()) if mine.any()
            else None}


def by_hour(requests: Table, good: np.ndarray, judged: np.ndarray, hour_s: float
            ) -> list[float | None]:
    """SLO attainment of the requests with targets arriving in each simulated hour."""
    hours = (requests.array("arrival_s").astype(float) // hour_s).astype(int)
    if not len(hours):
        return []
    return [float(good[(hours == h) & judged].mean()) if ((hours == h) & judged).any()
            else None for h in range(int(hours.max()) + 1)]


def peak(spans: Sequence[Life]) -> int:
    """Most replicas alive at once (provisioning to termination or loss)."""
    changes = sorted([(life.start, 1) for life in spans] + [(life.end, -1) for life in spans],
                     key=lambda c: (c[0], c[1]))
    level = best = 0
    for _, step in changes:
        level += step
        best = max(best, level)
    return best


def actuation(log: ScaleLog) -> list[tuple[float, float]]:
    """Per scale action, seed 001 §10's actuation fields from the lifecycle records: the
    provisioning delay (s) until the last replica it started began loading its model, and
    the time (s) that replica reached steady state (active, warm-up over); NaN for a
    scale-down, and for an action none of whose replicas got that far (cancelled by a
    scale-down, or the run ended first). An action's replicas are those of its config that
    entered provisioning at its time."""
    started: dict[tuple[int, str], list[str]] = {}
    entered: dict[tuple[str, str], int] = {}  # (instance, state) -> first time
    for time, instance, config, state in log.lifecycle:
        if state == "provisioning":
            started.setdefault((time, config), []).append(instance)
        entered.setdefault((instance, state), time)
    out = []
    for e in log.events:
        mine = started.get((e.time, e.config), []) if e.action == "up" else []
        loading = [entered[(i, "loading")] for i in mine if (i, "loading") in entered]
        active = [entered[(i, "active")] for i in mine if (i, "active") in entered]
        out.append(((max(loading) - e.time) / US_PER_S if loading else math.nan,
                    max(active) / US_PER_S if active else math.nan))
    return out


def scale_event_table(log: ScaleLog) -> Table:
    """One row per scale action (scale_events.csv)."""
    events = log.events
    actuated = actuation(log)
    return Table({
        "time_s": np.array([e.time / US_PER_S for e in events], dtype=float),
        "config": [e.config for e in events],
        "action": [e.action for e in events],
        "from": np.array([e.before for e in events], dtype=np.int64),
        "to": np.array([e.after for e in events], dtype=np.int64),
        "trigger": [e.trigger for e in events],
        "reason": [e.reason for e in events],
        "signals": [e.signals for e in events],
        "provisioning_delay_s": np.array([a[0] for a in actuated], dtype=float),
        "warmup_end_s": np.array([a[1] for a in actuated], dtype=float),
    })


def replica_table(log: ScaleLog, scenario: Scenario) -> Table:
    """Each config's replica count (not draining, terminated or dead) and how many take traffic
    after every lifecycle change (replicas.csv): the replica count over time."""
    taking = ROUTABLE if warming_routable(scenario) else ("active",)
    state: dict[str, tuple[str, str]] = {}  # instance -> (config, state)
    rows: list[tuple[int, str, int, int]] = []
    for time, instance, config, new in log.lifecycle:
        state[instance] = (config, new)
        members = [s for c, s in state.values() if c == config]
        counted = sum(1 for s in members if s != "draining" and s not in ENDED)
        routable = sum(1 for s in members if s in taking)
        if rows and rows[-1][0] == time and rows[-1][1] == config:
            rows.pop()
        rows.append((time, config, counted, routable))
    return Table({
        "time_s": np.array([r[0] / US_PER_S for r in rows], dtype=float),
        "config": [r[1] for r in rows],
        "replicas": np.array([r[2] for r in rows], dtype=np.int64),
        "routable": np.array([r[3] for r in rows], dtype=np.int64),
    })
