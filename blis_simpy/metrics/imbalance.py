"""Load imbalance (seed F.3: what `always-busiest` is for): a request left waiting in one
replica's queue while another replica sat idle the whole time.

A `load_imbalance` anomaly is one such request, an episode from its arrival in the queue to
its first step: it waited through at least one step of its own instance (so it was held back
by the work ahead of it, not just by the step in progress) while another replica of the fixed
cluster ran no step at all (so it would have started at once there). Judged from the step
rows and the requests' queue times, for a fixed cluster of monolithic replicas (`cluster:`,
no deployment section: replicas that come and go, models and P/D pools are not
interchangeable). Severity: the wait in seconds, capped at 1.

A streaming run (metrics/stream.py: `WaitingFile`) writes the waiting requests to a scratch
file as their chunks pass and judges them at the end a chunk at a time, against the steps of
each instance that the chunk's waits overlap, read back from its step file: the same anomalies
in the same order, in memory that does not grow with the run's length.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import NamedTuple

import numpy as np

from blis_simpy.core.records import Anomaly, InstanceRecord, Records
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.columns import Table

Spans = Mapping[str, tuple[np.ndarray, np.ndarray]]  # instance id -> its steps' starts, ends


class Waiting(NamedTuple):
    """The requests that were queued on an instance and not scheduled at once, in table order:
    instance, queued and scheduled times (µs; -1: never scheduled) and id."""

    instance: np.ndarray
    queued: np.ndarray
    scheduled: np.ndarray
    names: np.ndarray

    @classmethod
    def of(cls, requests: Table) -> Waiting:
        keep, queued, scheduled = waited(requests)
        return cls(np.asarray(requests["instance"], dtype=object)[keep], queued[keep],
                   scheduled[keep], np.asarray(requests["id"], dtype=object)[keep])


def waited(requests: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which of the table's requests were queued and not scheduled at once, and every row's
    queued and scheduled times (µs; -1: never)."""
    queued = micros(requests.array("queued_s"))
    scheduled = micros(requests.array("scheduled_s"))
    return (queued >= 0) & ((scheduled < 0) | (scheduled > queued)), queued, scheduled


def load_imbalance(records: Records, requests: Table, ended_at: int) -> list[Anomaly]:
    """Every request that waited in one replica's queue through a step while another replica
    was idle (module docstring). `ended_at`: when the run ended (a request never scheduled
    waited until then)."""
    return imbalanced(records.instances, {log.id: (log.start, log.end)
                                          for log in records.instances},
                      Waiting.of(requests), ended_at)


def imbalanced(instances: Sequence[InstanceRecord], spans: Spans, waiting: Waiting,
               ended_at: int) -> list[Anomaly]:
    """`load_imbalance` from the instances' step spans and the waiting requests."""
    logs = interchangeable(instances)
    index = {log.id: i for i, log in enumerate(logs)}
    # each request's instance as its position in `logs` (-1: none of them), found once
    where = np.fromiter(map(index.get, waiting.instance, repeat(-1)), dtype=np.int64,
                        count=len(waiting.instance))
    return [imbalance_anomaly(logs, position, waiting.names[row], queued, scheduled, idle)
            for position, row, queued, scheduled, idle
            in held_back(logs, spans, where, waiting.queued, waiting.scheduled, ended_at)]


def interchangeable(instances: Sequence[InstanceRecord]) -> Sequence[InstanceRecord]:
    """The instances among which a request could have gone elsewhere: a fixed cluster's
    monolithic replicas, two at least (none otherwise)."""
    logs = [log for log in instances if log.role is Role.MONOLITHIC]
    return logs if len(logs) >= 2 and len(logs) == len(instances) else []


def held_back(logs: Sequence[InstanceRecord], spans: Spans, where: np.ndarray,
              queued: np.ndarray, scheduled: np.ndarray, ended_at: int
              ) -> Iterator[tuple[int, int, int, int, int]]:
    """Each waiting request (`where`: its instance's position in `logs`) held back while
    another replica was idle, by instance and then in order: its instance's position, its
    row, its queued and scheduled times and the first idle replica's position. `spans` need
    hold only the steps that end after the earliest of these requests is queued and those
    that start before the last one is scheduled."""
    scheduled = np.where(scheduled < 0, ended_at, scheduled)
    for position, log in enumerate(logs):
        mine = np.flatnonzero((where == position) & (scheduled > queued))
        if not len(mine):
            continue
        q, s = queued[mine], scheduled[mine]
        starts = spans[log.id][0]
        first = np.searchsorted(starts, q, side="right")  # its instance's next step after q
        held = (first < len(starts)) & (starts[np.minimum(first, len(starts) - 1)] < s)
        mine, q, s = mine[held], q[held], s[held]  # only the held ones can be found
        idle_on = np.full(len(mine), -1, dtype=np.int64)  # the first idle one's position
        for j, other in enumerate(logs):
            if other is log:
                continue
            o_starts, o_ends = spans[other.id]
            nxt = np.searchsorted(o_ends, q, side="right")  # its first step ending after q
            busy = (nxt < len(o_starts)) & (o_starts[np.minimum(nxt, len(o_starts) - 1)] < s) \
                if len(o_starts) else np.zeros(len(mine), dtype=bool)
            idle_on[(idle_on < 0) & ~busy] = j
        for k in np.flatnonzero(idle_on >= 0).tolist():
            yield position, int(mine[k]), int(q[k]), int(s[k]), int(idle_on[k])


def imbalance_anomaly(logs: Sequence[InstanceRecord], position: int, name: str, queued: int,
                      scheduled: int, idle: int) -> Anomaly:
    wait, log = scheduled - queued, logs[position]
    return Anomaly("load_imbalance", queued, log.id, (str(name),),
                   f"waited {wait / US_PER_MS:.1f} ms on {log.id} while {logs[idle].id} was idle",
                   scheduled, min(1.0, wait / US_PER_S))


def micros(seconds: np.ndarray) -> np.ndarray:
    """Seconds -> integer µs; NaN (never happened) -> -1."""
    values = np.asarray(seconds, dtype=float)
    return np.where(np.isnan(values), -1, np.rint(values * US_PER_S)).astype(np.int64)
