"""What failures cost a run, computed from its records: the faults channel (crashes, repairs,
requests lost, retried and failed, slowdowns), the lifecycle log and the requests table.

* availability: the share of instance-time spent serving (active, warming or draining) out of
  serving plus down (failed, or dead for good), over the run;
* lost tokens: tokens the failed instances had computed for the requests they lost (prefill
  and decode), all thrown away; `goodput_lost_fraction` is their share of every token the
  engines computed;
* retried requests were sent again at least once (`retries` counts every re-send); failed
  requests ended `failed`, lost with their retries used up.

Each crash is also an `instance_failure` anomaly, from the crash to the repair (or the run's
end), naming the requests lost with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.core.records import FAULT_FIELDS, Anomaly, FaultRow, Records
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table

SERVING = ("warming", "active", "draining")
DOWN = ("failed", "dead")


def up_and_down(lifecycle: Sequence[tuple[int, str, str, str]], ended_at: int
                ) -> tuple[int, int]:
    """Instance-µs serving and down over [0, ended_at], from the lifecycle transitions."""
    by_instance: dict[str, list[tuple[int, str]]] = {}
    for time, instance, _, state in lifecycle:
        by_instance.setdefault(instance, []).append((min(time, ended_at), state))
    up = down = 0
    for changes in by_instance.values():
        for (start, state), end in zip(changes, [t for t, _ in changes[1:]] + [ended_at],
                                       strict=True):
            if state in SERVING:
                up += end - start
            elif state in DOWN:
                down += end - start
    return up, down


def fault_summary(records: Records, lifecycle: Sequence[tuple[int, str, str, str]],
                  computed: int) -> dict[str, Any]:
    """The summary's `faults` section, from the fault records and the tokens the run's steps
    computed (`computed`), not the requests or steps tables (a streaming run's are in its
    folder): a request that failed has one `failed` row."""
    rows = records.faults
    lost = [row for row in rows if row[1] == "lost"]
    retried = {row[3] for row in rows if row[1] == "retry"}
    lost_tokens = sum(int(row[4]) for row in lost)
    up, down = up_and_down(lifecycle, records.ended_at)
    return {
        "crashes": sum(1 for row in rows if row[1] == "crash"),
        "repairs": sum(1 for row in rows if row[1] == "repair"),
        "slowdowns": sum(1 for row in rows if row[1] == "slow"),
        "lost_requests": len(lost),
        "retried_requests": len(retried),
        "retries": sum(1 for row in rows if row[1] == "retry"),
        "failed_requests": sum(1 for row in rows if row[1] == "failed"),
        "lost_tokens": lost_tokens,
        "goodput_lost_fraction": lost_tokens / computed if computed else 0.0,
        "availability": up / (up + down) if up + down else 1.0,
        "downtime_s": down / US_PER_S,
    }


def computed_tokens(records: Records) -> int:
    """Prefill and decode tokens every step of the run computed (from the in-memory steps)."""
    return sum(int(inst.new_tokens.sum()) + int(inst.decodes.sum())
               for inst in records.instances)


def fault_table(rows: Sequence[FaultRow]) -> Table:
    """One row per fault record, in time order (faults.csv)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in FAULT_FIELDS]
    return Table({
        "time_s": np.array(columns[0], dtype=float) / US_PER_S,
        "event": list(columns[1]),
        "instance": list(columns[2]),
        "request": list(columns[3]),
        "detail": list(columns[4]),
    })


def failure_anomalies(records: Records) -> list[Anomaly]:
    """An `instance_failure` episode per crash: to its repair, or the run's end."""
    found = []
    open_at: dict[str, tuple[int, str]] = {}  # instance -> (crash time, reason)
    lost: dict[str, list[str]] = {}

    def close(instance: str, end: int, how: str) -> None:
        start, reason = open_at.pop(instance)
        found.append(Anomaly("instance_failure", start, instance,
                             tuple(lost.pop(instance, [])), f"{reason}; {how}", end))

    for time, event, instance, request, detail in records.faults:
        if event == "crash":
            open_at[instance] = (time, detail)
        elif event == "lost" and instance in open_at:
            lost.setdefault(instance, []).append(request)
        elif event == "repair" and instance in open_at:
            close(instance, time, f"repaired after {(time - open_at[instance][0]) / US_PER_S:g} s")
    for instance in list(open_at):
        close(instance, max(records.ended_at, open_at[instance][0]), "down at the end")
    return found
