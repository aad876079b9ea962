"""The P/D plot of a disaggregated run (one with a transfers table): each pool's busy share
over time, the KV handoffs waiting for their link, and how long the transfers took, so a
pool that is the bottleneck, a saturated link or a decode pool short of KV room can be read
off one figure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from blis_simpy.report.figures import bin_edges, bin_width, line_style, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TRANSFER_COLUMNS = ("asked_s", "reserved_s", "start_s", "end_s", "outcome")
QUEUE_COLUMNS = ("time_s", "waiting_transfers")
ROLE_COLUMNS = ("instance", "role", "time_s", "busy_s")


def pd_plot(instances: pd.DataFrame, transfers: pd.DataFrame, queue: pd.DataFrame
            ) -> Figure:
    figure, (busy_ax, queue_ax, took_ax) = new_figure(11, 8.5, 3)
    edges, width, pools = pool_busy_share(instances)
    end = run_end(instances)
    for i, (role, (count, share)) in enumerate(pools.items()):
        busy_ax.stairs(share, edges, color=line_style(i)[0], label=f"{role} ({count})")
    busy_ax.set(title=f"Pool busy share ({width:g} s bins)", ylabel="busy share")
    busy_ax.set_ylim(0, 1.05)
    busy_ax.legend(loc="upper right")
    times = np.append(queue["time_s"].to_numpy(dtype=float), end)
    depth = queue["waiting_transfers"].to_numpy(dtype=float)
    if len(depth):
        queue_ax.step(times, np.append(depth, depth[-1]), where="post")
    queue_ax.set(title="KV handoffs waiting for their link (incl. for decode KV room)",
                 xlabel="simulated time (s)", ylabel="handoffs")
    moved = transfers[transfers["outcome"] == "transferred"]
    took = (moved["end_s"] - moved["start_s"]).to_numpy(dtype=float) * 1000
    waited = (moved["start_s"] - moved["asked_s"]).to_numpy(dtype=float) * 1000
    took_ax.hist([took, waited], bins=30, label=["on the link", "waiting before it"])
    took_ax.set(title=f"KV transfers ({len(moved)} moved, {len(transfers) - len(moved)} "
                "dropped or abandoned)", xlabel="ms", ylabel="transfers")
    took_ax.legend(loc="upper right")
    for ax in (busy_ax, queue_ax, took_ax):
        ax.grid(alpha=0.3)
    figure.suptitle("P/D disaggregation: pools and KV transfers")
    return figure


def pool_busy_share(instances: pd.DataFrame
                    ) -> tuple[np.ndarray, float, dict[str, tuple[int, np.ndarray]]]:
    """Time-bin edges, the bin width, and per pool (prefill, decode) its instance count and
    the share of its instances' time spent in steps in each bin."""
    width = bin_width(run_end(instances))
    edges = bin_edges(run_end(instances), width)
    pools = {}
    for role in ("prefill", "decode"):
        rows = instances[instances["role"] == role]
        count = rows["instance"].nunique()
        busy = sum((np.diff(busy_before(group["time_s"].to_numpy(dtype=float),
                                        group["busy_s"].to_numpy(dtype=float), edges))
                    for _, group in rows.groupby("instance")), np.zeros(len(edges) - 1))
        pools[role] = (count, busy / (width * max(count, 1)))
    return edges, width, pools


def run_end(instances: pd.DataFrame) -> float:
    """The end of the last step (at least 1 ms, so a run without steps still has an axis)."""
    return max(float((instances["time_s"] + instances["busy_s"]).max())
               if len(instances) else 0.0, 1e-3)


def busy_before(starts: np.ndarray, busy: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """One instance's busy seconds before each edge: its steps (start, length) never overlap,
    so a step that spans an edge is split there, not counted whole in the bin it starts in."""
    order = np.argsort(starts, kind="stable")
    starts, busy = starts[order], busy[order]
    done = np.concatenate(([0.0], np.cumsum(busy)))
    i = np.searchsorted(starts, edges, side="right")  # steps started before each edge
    last = np.maximum(i - 1, 0)
    partial = np.where(i > 0, np.minimum(edges - starts[last], busy[last]), 0.0) \
        if len(starts) else np.zeros(len(edges))
    return done[np.maximum(i - 1, 0)] * (i > 0) + partial
