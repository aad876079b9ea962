"""Anomalies (seed D.8, design §10): each occurrence with its time, instance and requests.

Detected while the run goes (the engine reports priority inversions, head-of-line blocking
and preemptions; the gateway reports rejections) or from its records at the end (SLO
violations, preemption storms, rejection bursts). `scale_oscillation` and `kv_thrashing` are
recorded by the autoscaler and the KV tiers when those exist; nothing here invents them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TYPES = ("priority_inversion", "hol_blocking", "slo_violation", "preemption_storm",
         "rejection_burst", "scale_oscillation", "kv_thrashing")

# Urgency by SLO class when judging priority inversions: lower rank = more urgent. A class
# not listed ranks with the unnamed default class.
DEFAULT_CLASS_RANKS = {"realtime": 0, "critical": 0, "interactive": 1, "standard": 1, "": 2,
                       "default": 2, "batch": 3, "sheddable": 3, "background": 4}


@dataclass(frozen=True, slots=True)
class Anomaly:
    type: str
    time: int  # µs
    instance: str  # "" when cluster-wide
    requests: tuple[str, ...]
    detail: str


class AnomalyLog:
    """Append-only record of anomalies; shared by the instances and the gateway."""

    def __init__(self, class_ranks: dict[str, int] | None = None) -> None:
        self.records: list[Anomaly] = []
        ranks = dict(DEFAULT_CLASS_RANKS)
        for cls, rank in (class_ranks or {}).items():
            ranks[cls] = rank
            if cls in ("", "default"):  # the unnamed class is reported as "default"
                ranks[""] = ranks["default"] = rank
        self.ranks = ranks
        self.default_rank = ranks[""]
        self.preemptions: list[tuple[int, str, str]] = []  # (time, instance, request)
        self.rejections: list[tuple[int, str, str]] = []

    def record(self, kind: str, time: int, instance: str, requests: Sequence[str],
               detail: str = "") -> None:
        if kind not in TYPES:
            raise ValueError(f"unknown anomaly type {kind!r}; valid: {', '.join(TYPES)}")
        self.records.append(Anomaly(kind, time, instance, tuple(requests), detail))

    def urgency(self, slo_class: str, arrival: int) -> tuple[int, int]:
        """(class rank, arrival): smaller is more urgent."""
        return (self.ranks.get(slo_class, self.default_rank), arrival)


def bursts(events: Sequence[tuple[int, str, str]], count: int, window_us: int
           ) -> list[tuple[int, int, list[str]]]:
    """Clusters of at least `count` events within `window_us`: (start, end, requests), each
    event in at most one cluster (scanning forward, greedy)."""
    found = []
    times = [t for t, _, _ in events]
    i = 0
    while i + count <= len(events):
        if times[i + count - 1] - times[i] < window_us:
            j = i + count
            while j < len(events) and times[j] - times[i] < window_us:
                j += 1
            found.append((times[i], times[j - 1], [r for _, _, r in events[i:j]]))
            i = j
        else:
            i += 1
    return found
