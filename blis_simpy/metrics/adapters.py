"""LoRA adapter metrics (engine.lora): summary.json `adapters`, the `adapter_loads` table and
the requests table's `adapter` column, from the records.

Per adapter: the requests that named it and how they ended, its loads (misses: an admission
that found it absent and loaded it, evicting another if every slot was taken), its evictions,
the admissions that found it resident (hits) and its requests' TTFT and end-to-end latency.
Requests of the base model are counted under "" only in the totals. A request preempted and
admitted again is admitted (and may miss) again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.core.records import Records
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.raw import distribution


def adapter_summary(records: Records, requests: Table) -> dict[str, Any]:
    """The summary's `adapters` section."""
    names = records.requests.adapter
    ttft, e2e = requests.array("ttft_ms"), requests.array("e2e_ms")
    states = records.requests.state_array
    loads: dict[str, int] = {}
    evictions: dict[str, int] = {}
    for _, _, adapter, evicted in records.adapter_loads:
        loads[adapter] = loads.get(adapter, 0) + 1
        if evicted:
            evictions[evicted] = evictions.get(evicted, 0) + 1
    hits = records.adapter_hits
    rows = np.array([i for i, name in enumerate(names) if name], dtype=np.int64)
    by_name: dict[str, list[int]] = {}
    for i in rows:
        by_name.setdefault(names[i], []).append(int(i))
    per: dict[str, Any] = {}
    for name in sorted(set(by_name) | set(loads)):
        mine = np.array(by_name.get(name, []), dtype=np.int64)
        per[name] = {
            "requests": len(mine),
            "completed": int(np.count_nonzero(states[mine] == "completed")),
            "loads": loads.get(name, 0),
            "evictions": evictions.get(name, 0),
            "hits": hits.get(name, 0),
            **distribution("ttft", ttft[mine]),
            **distribution("e2e", e2e[mine]),
        }
    total_loads = sum(loads.values())
    admissions = total_loads + sum(hits.values())
    return {
        "adapters": len(per),
        "requests": len(rows),
        "base_model_requests": len(names) - len(rows),
        "loads": total_loads,
        "evictions": sum(evictions.values()),
        "miss_rate": total_loads / admissions if admissions else None,
        **distribution("ttft", ttft[rows]),
        "per_adapter": per,
    }


def adapter_load_table(rows: Sequence[tuple[int, str, str, str]]) -> Table:
    """One row per adapter load, in time order (adapter_loads.csv)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in range(4)]
    return Table({
        "time_s": np.array(columns[0], dtype=float) / US_PER_S,
        "instance": list(columns[1]),
        "adapter": list(columns[2]),
        "evicted": list(columns[3]),
    })
