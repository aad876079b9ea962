"""The replica-count plot of an autoscaled run (one with a replicas table): the load offered,
each deployment config's replica count (and how many take traffic), and the TTFT requests
got, on one time axis, so a scale-up can be read against the load that caused it and the
latency it did or did not save."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from blis_simpy.report.figures import bin_edges, bin_width, line_style, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPLICA_COLUMNS = ("time_s", "config", "replicas", "routable")


def replica_plot(requests: pd.DataFrame, replicas: pd.DataFrame) -> Figure:
    figure, (load_ax, rep_ax, ttft_ax) = new_figure(11, 8.5, 3, sharex=True)
    arrivals = requests["arrival_s"].to_numpy(dtype=float)
    end = max(float(arrivals.max()) if len(arrivals) else 0.0,
              float(replicas["time_s"].max()) if len(replicas) else 0.0, 1e-3)
    width = bin_width(end)
    edges = bin_edges(end, width)
    load_ax.stairs(np.histogram(arrivals, edges)[0] / width, edges, fill=True, alpha=0.7)
    load_ax.set(title=f"Arrivals per second ({width:g} s bins)", ylabel="requests/s")
    for i, (config, frame) in enumerate(replicas.groupby("config", sort=False)):
        colour, _ = line_style(i)
        times = np.append(frame["time_s"].to_numpy(dtype=float), edges[-1])
        for column, style, label in (("replicas", "-", config),
                                     ("routable", ":", f"{config} (taking traffic)")):
            counts = frame[column].to_numpy(dtype=float)
            rep_ax.step(times, np.append(counts, counts[-1]), where="post", color=colour,
                        linestyle=style, label=label)
    rep_ax.set(title="Replicas per deployment config", ylabel="replicas")
    rep_ax.set_ylim(bottom=0)
    rep_ax.legend(loc="upper right")
    done = requests[requests["final_state"] == "completed"]
    ttft_ax.scatter(done["arrival_s"].to_numpy(dtype=float),
                    done["ttft_ms"].to_numpy(dtype=float), s=4, alpha=0.5)
    ttft_ax.set(title="TTFT by arrival time", ylabel="TTFT (ms)", xlabel="simulated time (s)")
    for ax in (load_ax, rep_ax, ttft_ax):
        ax.set_xlim(0, edges[-1])
        ax.grid(alpha=0.3)
    figure.suptitle("Load, replicas and latency over time")
    return figure
