"""Load imbalance (seed F.3: what `always-busiest` is for): a request left waiting in one
replica's queue while another replica sat idle the whole time.

A `load_imbalance` anomaly is one such request, an episode from its arrival in the queue to
its first step: it waited through at least one step of its own instance (so it was held back
by the work ahead of it, not just by the step in progress) while another replica of the fixed
cluster ran no step at all (so it would have started at once there). Judged from the step
rows and the requests' queue times, for a fixed cluster of monolithic replicas (`cluster:`,
no deployment section: replicas that come and go, models and P/D pools are not
interchangeable). Severity: the wait in seconds, capped at 1.
"""

from __future__ import annotations

import numpy as np

from blis_simpy.core.records import Anomaly, Records
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.columns import Table


def load_imbalance(records: Records, requests: Table, ended_at: int) -> list[Anomaly]:
    """Every request that waited in one replica's queue through a step while another replica
    was idle (module docstring). `ended_at`: when the run ended (a request never scheduled
    waited until then)."""
    logs = [log for log in records.instances if log.role is Role.MONOLITHIC]
    if len(logs) < 2 or len(logs) != len(records.instances):
        return []
    spans = {log.id: (log.start, log.end) for log in logs}
    queued = micros(requests.array("queued_s"))
    scheduled = micros(requests.array("scheduled_s"))
    scheduled = np.where(scheduled < 0, ended_at, scheduled)
    instance = np.asarray(requests["instance"], dtype=object)
    names = np.asarray(requests["id"], dtype=object)
    found = []
    for log in logs:
        mine = np.flatnonzero((instance == log.id) & (queued >= 0) & (scheduled > queued))
        if not len(mine):
            continue
        q, s = queued[mine], scheduled[mine]
        starts = spans[log.id][0]
        first = np.searchsorted(starts, q, side="right")  # its instance's next step after q
        held = (first < len(starts)) & (starts[np.minimum(first, len(starts) - 1)] < s)
        idle_on = np.full(len(mine), "", dtype=object)
        for other in logs:
            if other is log:
                continue
            o_starts, o_ends = spans[other.id]
            nxt = np.searchsorted(o_ends, q, side="right")  # its first step ending after q
            busy = (nxt < len(o_starts)) & (o_starts[np.minimum(nxt, len(o_starts) - 1)] < s) \
                if len(o_starts) else np.zeros(len(mine), dtype=bool)
            idle_on = np.where((idle_on == "") & ~busy, other.id, idle_on)
        for k in np.flatnonzero(held & (idle_on != "")):
            wait = int(s[k] - q[k])
            found.append(Anomaly(
                "load_imbalance", int(q[k]), log.id, (str(names[mine[k]]),),
                f"waited {wait / US_PER_MS:.1f} ms on {log.id} while {idle_on[k]} was idle",
                int(s[k]), min(1.0, wait / US_PER_S)))
    return found


def micros(seconds: np.ndarray) -> np.ndarray:
    """Seconds -> integer µs; NaN (never happened) -> -1."""
    values = np.asarray(seconds, dtype=float)
    return np.where(np.isnan(values), -1, np.rint(values * US_PER_S)).astype(np.int64)
