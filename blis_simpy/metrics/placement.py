"""Node pool metrics (issue 35 item 5), from the ScaleLog's placements channel: per pool its
nodes and GPUs, how many GPUs replicas held at the peak and on average (GPU-seconds held over
GPU-seconds of ready nodes), replicas placed and not placed; the placement of each replica
(placements.csv); and the replicas table with each config's GPUs held and its pool's free GPUs
after every change.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blis_simpy.config.deployment import DeploymentSection
from blis_simpy.config.node_pools import NodePool
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table


def node_pool_summary(log: ScaleLog, pools: list[NodePool], ended_at: int) -> dict[str, Any]:
    """The deployment summary's `node_pools` section. A node counts in the pool's inventory
    from when it is added (its provisioning included: replicas may hold its GPUs then)."""
    out = {}
    span = max(ended_at, 1)
    for pool in pools:
        rows = [r for r in log.placements if r[3] == pool.id and r[0] <= ended_at]
        inventory_us = held_us = 0
        held = peak = gpus = last = 0
        for time, _, _, _, node, count, what in rows:
            inventory_us += gpus * (time - last)
            held_us += held * (time - last)
            last = time
            if what == "placed":
                held += count
                peak = max(peak, held)
            elif what == "released":
                held -= count
            gpus += pool.gpus_per_node * added(what, node, rows)
        inventory_us += gpus * (ended_at - last)
        held_us += held * (ended_at - last)
        out[pool.id] = {
            "gpu": pool.gpu,
            "gpus_per_node": pool.gpus_per_node,
            "nodes_at_start": pool.nodes,
            "nodes_added": sum(1 for r in rows if r[6] == "node_added"),
            "nodes_at_end": gpus // pool.gpus_per_node,
            "peak_gpus_held": peak,
            "gpu_utilization": held_us / inventory_us if inventory_us else 0.0,
            "mean_gpus_held": held_us / span,
            "replicas_placed": sum(1 for r in rows if r[6] == "placed"),
            "replicas_not_placed": sum(1 for r in rows if r[6] == "unplaced"),
        }
    return out


def added(what: str, node: str, rows: list[tuple[int, str, str, str, str, int, str]]) -> int:
    """1 when this row brings a node into the pool: it is added, or it is ready without
    having been added (a node of the pool at t=0)."""
    if what == "node_added":
        return 1
    if what == "node_ready":
        return int(not any(r[6] == "node_added" and r[4] == node for r in rows))
    return 0


def placement_table(log: ScaleLog) -> Table:
    """One row per replica placed (placements.csv): its config, pool, node and GPUs, when it
    took them and when it gave them back (empty while it still held them at the end)."""
    placed = [r for r in log.placements if r[6] == "placed"]
    released = {r[1]: r[0] for r in log.placements if r[6] == "released"}
    return Table({
        "instance": [r[1] for r in placed],
        "config": [r[2] for r in placed],
        "node_pool": [r[3] for r in placed],
        "node": [r[4] for r in placed],
        "gpus": np.array([r[5] for r in placed], dtype=np.int64),
        "placed_s": np.array([r[0] / US_PER_S for r in placed], dtype=float),
        "released_s": np.array([released[r[1]] / US_PER_S if r[1] in released else np.nan
                                for r in placed], dtype=float),
    })


def with_placement(replicas: Table, log: ScaleLog, pools: list[NodePool],
                   pool_of: dict[str, str]) -> Table:
    """The replicas table with, per row, the GPUs the config's replicas hold and its node
    pool's free GPUs (on its nodes, those provisioning included) at that time, after the
    changes made then."""
    times = replicas.array("time_s")
    configs = replicas["config"]
    events = sorted(log.placements, key=lambda r: r[0])  # stable: the order they happened
    per_node = {pool.id: pool.gpus_per_node for pool in pools}
    held: dict[str, int] = {}
    free: dict[str, int] = {}
    gpus_col, free_col = [], []
    i = 0
    for time_s, config in zip(times.tolist(), configs, strict=True):
        limit = round(time_s * US_PER_S)
        while i < len(events) and events[i][0] <= limit:
            _, _, cfg, pool, _, gpus, what = events[i]
            if what == "placed":
                held[cfg] = held.get(cfg, 0) + gpus
                free[pool] = free.get(pool, 0) - gpus
            elif what == "released":
                held[cfg] = held.get(cfg, 0) - gpus
                free[pool] = free.get(pool, 0) + gpus
            else:
                free[pool] = free.get(pool, 0) + per_node[pool] * added(what, events[i][4],
                                                                         events)
            i += 1
        gpus_col.append(held.get(config, 0))
        free_col.append(free.get(pool_of.get(config, ""), 0))
    return Table({**replicas.columns, "node_pool": [pool_of.get(c, "") for c in configs],
                  "gpus": np.array(gpus_col, dtype=np.int64),
                  "pool_free_gpus": np.array(free_col, dtype=np.int64)})


def config_pools(section: DeploymentSection) -> dict[str, str]:
    """Each deployment config's (and P/D pool's) node pool, by the ids the ScaleLog uses."""
    out = {}
    for _, config in section.configs():
        pool = config.node_pool or ""
        if config.pd is not None:
            out[f"{config.id}/prefill"] = out[f"{config.id}/decode"] = pool
        else:
            out[config.id] = pool
    return out
