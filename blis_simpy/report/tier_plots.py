"""The KV tiers' figure of a run with `engine.kv_tiers` (kv_tiers.png): how full the CPU and
storage tiers were over time, per instance, and where prefix blocks were found."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from blis_simpy.report.figures import line_style, natural_key, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TIER_COLUMNS = ("instance", "time_s", "kv_utilization", "kv_cpu_utilization",
                "kv_storage_utilization")


def kv_tiers(instances: pd.DataFrame, tiers: dict[str, Any]) -> Figure:
    """Left: GPU, CPU and storage use per instance over time. Right: the share of prefix-block
    lookups found on each tier, with the thrashing rate."""
    figure, (use_ax, hits_ax) = new_figure(12, 4.5, 1, 2)
    groups = dict(list(instances.groupby(instances["instance"].astype(str), sort=False)))
    storage = bool(instances["kv_storage_utilization"].to_numpy(dtype=float).any())
    columns = [("kv_utilization", "GPU", "-"), ("kv_cpu_utilization", "CPU", "--")]
    if storage:
        columns.append(("kv_storage_utilization", "storage", ":"))
    for i, name in enumerate(sorted(groups, key=natural_key)):
        frame = groups[name]
        colour, _ = line_style(i)
        for column, tier, style in columns:
            use_ax.step(frame["time_s"].to_numpy(dtype=float),
                        100 * frame[column].to_numpy(dtype=float), where="post",
                        label=f"{name} {tier}", linewidth=0.9, color=colour, linestyle=style)
    use_ax.set(title="KV tier use", xlabel="simulated time (s)", ylabel="blocks used (%)",
               ylim=(-2, 100))
    use_ax.grid(alpha=0.3)
    if len(groups) <= 4:
        use_ax.legend(fontsize="small")
    names = ["GPU", "CPU", "storage", "miss"]
    shares = [tiers["gpu_hit_rate"], tiers["cpu_hit_rate"], tiers["storage_hit_rate"],
              1 - tiers["hit_rate"]]
    hits_ax.bar(names, [100 * s for s in shares], color=["tab:green", "tab:blue", "tab:purple",
                                                       "tab:gray"])
    hits_ax.set(title=f"Prefix blocks found (thrashing rate {tiers['thrashing_rate']:.1%}, "
                f"{tiers['reloaded_blocks']:,} reloaded)", ylabel="share of lookups (%)",
                ylim=(0, 100))
    hits_ax.grid(alpha=0.3, axis="y")
    figure.suptitle("KV tiers")
    return figure
