"""Per-event tables from the records (seed 001 §10's `PreemptionRecord` and
`KVTransferRecord`): one row per preemption (preemptions.csv, every run) and one per transfer
between KV tiers (kv_transfers.csv, with `engine.kv_tiers`). P/D handoffs have their own
table (transfers.csv, metrics/pd.py)."""

from __future__ import annotations

import numpy as np

from blis_simpy.core.records import Records
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.columns import Table


def preemption_table(records: Records) -> Table:
    """time_s, instance, request, and the tokens it had computed there and lost (recompute
    preemption: its prompt and every token already streamed are prefilled again)."""
    rows = records.preemptions
    return Table({
        "time_s": np.array([r[0] / US_PER_S for r in rows], dtype=float),
        "instance": [r[1] for r in rows],
        "request": [r[2] for r in rows],
        "discarded_tokens": np.array([r[3] for r in rows], dtype=np.int64),
    })


def kv_transfer_table(records: Records) -> Table | None:
    """One row per transfer queued on a KV tier link, by time then instance (None without
    tiers): from and to tier (gpu, cpu, storage), blocks, and latency (ms: until the transfer
    ends, waiting for the link included; a reload's is what the step admitting it waits)."""
    tiered = [(inst.id, inst.tiers) for inst in records.instances if inst.tiers is not None]
    if not tiered:
        return None
    rows = sorted(((t, i, source, target, blocks, latency) for i, tiers in tiered
                   for t, source, target, blocks, latency in tiers.transfers),
                  key=lambda r: (r[0], r[1]))
    return Table({
        "time_s": np.array([r[0] / US_PER_S for r in rows], dtype=float),
        "instance": [r[1] for r in rows],
        "from_tier": [r[2] for r in rows],
        "to_tier": [r[3] for r in rows],
        "blocks": np.array([r[4] for r in rows], dtype=np.int64),
        "latency_ms": np.array([r[5] / US_PER_MS for r in rows], dtype=float),
    })
