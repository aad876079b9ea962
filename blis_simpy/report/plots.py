"""PNG plots of one run folder: latency CDFs, per-instance state, throughput over time.

matplotlib is optional (the `plots` extra) and imported only inside `render`. Figures are
built as bare `Figure`s drawn by Agg under matplotlib's default style: no pyplot state, no
backend switch and no user matplotlibrc, so the same run gives the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import US_PER_MS
from blis_simpy.report import (
    TABLE_FORMATS,
    kv_blocks_total,
    load_summary,
    read_table,
    run_folder,
)
from blis_simpy.report.figures import (
    DPI,
    bin_edges,
    bin_width,
    line_style,
    natural_key,
    new_figure,
)
from blis_simpy.report.pd_plots import QUEUE_COLUMNS, ROLE_COLUMNS, TRANSFER_COLUMNS, pd_plot
from blis_simpy.report.scaling import REPLICA_COLUMNS, replica_plot
from blis_simpy.report.tier_plots import TIER_COLUMNS, kv_tiers

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

REQUEST_COLUMNS = ("arrival_s", "first_token_s", "completion_s", "ttft_ms", "e2e_ms",
                   "final_state")
STEP_COLUMNS = ("instance", "start_s", "duration_ms", "decode_requests", "batch_size",
                "kv_blocks_used", "queue_depth")
# PNG metadata otherwise names the matplotlib version; leave it out so files depend on data.
PNG_METADATA: dict[str, Any] = {"Software": None}
MAX_LEGEND = 16  # instances named in the legend; more would bury the plot


def render(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write latency_cdf.png, instances.png and throughput.png into `out_dir`, kv_tiers.png
    for a run with KV tiers, pd.png for a disaggregated one and replicas.png for an
    autoscaled run."""
    run_folder(run_dir)
    requests = read_table(run_dir, "requests", REQUEST_COLUMNS)
    steps = read_table(run_dir, "steps", STEP_COLUMNS)
    kv_total = kv_blocks_total(run_dir)
    mpl = matplotlib()
    figures = {
        "latency_cdf.png": lambda: latency_cdf(requests),
        "instances.png": lambda: instances(steps, kv_total),
        "throughput.png": lambda: throughput(requests, steps),
    }
    tiers = load_summary(run_dir).get("kv_tiers")
    if isinstance(tiers, dict):  # a run with KV tiers below the GPU
        table = read_table(run_dir, "instances", TIER_COLUMNS)
        figures["kv_tiers.png"] = lambda: kv_tiers(table, tiers)
    if any((run_dir / f"transfers.{fmt}").is_file() for fmt in TABLE_FORMATS):  # P/D
        table = read_table(run_dir, "instances", ROLE_COLUMNS)
        roles = dict(zip(table["instance"], table["role"], strict=True))
        figures["instances.png"] = lambda: instances(steps, kv_total, roles)
        figures["pd.png"] = lambda: pd_plot(
            table, read_table(run_dir, "transfers", TRANSFER_COLUMNS),
            read_table(run_dir, "transfer_queue", QUEUE_COLUMNS))
    if any((run_dir / f"replicas.{fmt}").is_file() for fmt in TABLE_FORMATS):
        replicas = read_table(run_dir, "replicas", REPLICA_COLUMNS)
        figures["replicas.png"] = lambda: replica_plot(requests, replicas)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with mpl.style.context("default"):
        for name, build in figures.items():
            figure = build()
            figure.savefig(out_dir / name, format="png", dpi=DPI, metadata=PNG_METADATA)
            written.append(out_dir / name)
    return written


def matplotlib() -> Any:
    """The matplotlib module, or the input error that tells how to install it."""
    try:
        import matplotlib
        import matplotlib.style  # render uses style.context; a submodule, not an attribute
    except ImportError:
        raise ScenarioError("", "matplotlib is not installed: install blis-simpy[plots]"
                            ) from None
    return matplotlib


def note_empty(ax: Axes, text: str) -> None:
    """Say why an axis is blank rather than leave a puzzling empty frame."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


# --- latency CDFs -------------------------------------------------------------------------

def latency_cdf(requests: pd.DataFrame) -> Figure:
    """TTFT and E2E empirical CDFs of completed requests, one line per SLO class."""
    figure, (ttft_ax, e2e_ax) = new_figure(11, 4.5, 1, 2)
    done = completed(requests)
    classes = slo_classes(done)
    panels = ((ttft_ax, "ttft_ms", "Time to first token", "TTFT (ms)"),
              (e2e_ax, "e2e_ms", "End-to-end latency", "E2E latency (ms)"))
    for ax, column, title, xlabel in panels:
        for label, frame in classes:
            x, y = ecdf(frame[column].to_numpy(dtype=float))
            ax.step(x, y, where="post", label=f"{label} (n={len(x)})")
        ax.set(title=f"{title} CDF", xlabel=xlabel, ylabel="fraction of requests",
               ylim=(0, 1.02))
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        if classes:
            ax.legend(title="SLO class", loc="lower right")
        else:
            note_empty(ax, "no completed requests")
    figure.suptitle(f"Latency of completed requests ({len(done)})")
    return figure


def completed(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests that finished: only they have both a TTFT and an end-to-end latency."""
    done = requests[requests["final_state"].astype(str) == "completed"]
    return done[np.isfinite(done["ttft_ms"].astype(float))
                & np.isfinite(done["e2e_ms"].astype(float))]


TOP_CLASSES = 10  # SLO classes drawn as lines of their own; the rest are pooled


def slo_classes(requests: pd.DataFrame, top: int = TOP_CLASSES
                ) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) per SLO class in name order; the unnamed class is shown as "default".
    With more than `top` classes (a trace keyed by user), the `top` with the most requests
    are kept and the rest pooled as one line, "other (N classes)": thousands of lines are
    neither readable nor quick to draw."""
    if requests.empty:
        return []
    column = requests.get("slo_class", pd.Series("", index=requests.index))
    names = column.astype(object).where(column.notna(), "").astype(str)  # all-blank csv: NaN
    parts = [(str(name) or "default", rows)
             for name, rows in requests.groupby(names.to_numpy(), sort=True)]
    if len(parts) <= top:
        return parts
    ranked = sorted(range(len(parts)), key=lambda i: (-len(parts[i][1]), parts[i][0]))
    kept = sorted(ranked[:top])
    rest = [parts[i][1] for i in sorted(ranked[top:])]
    pooled = pd.concat(rest).sort_index()
    return [parts[i] for i in kept] + [(f"other ({len(rest):,} classes)", pooled)]


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and the fraction of values at or below each."""
    x = np.sort(values[np.isfinite(values)])
    return x, np.arange(1, len(x) + 1) / max(len(x), 1)


# --- per-instance state -------------------------------------------------------------------

def instances(steps: pd.DataFrame, kv_total: int | None,
              roles: dict[str, str] | None = None) -> Figure:
    """Queue depth, batch size and KV use at each step start, one step-wise line per instance
    (named with its role in a P/D run)."""
    from matplotlib.ticker import MaxNLocator

    figure, axes = new_figure(11, 8.5, 3, sharex=True)
    kv_label = "KV utilisation (%)" if kv_total else "KV blocks used"
    panels = (("queue_depth", "Queue depth", "waiting requests"),
              ("batch_size", "Batch size", "running requests"),
              ("kv_blocks_used", "KV cache use", kv_label))
    groups = dict(list(steps.groupby(steps["instance"].astype(str), sort=False)))
    names = sorted(groups, key=natural_key)
    for ax, (column, title, ylabel) in zip(axes, panels, strict=True):
        for i, name in enumerate(names):
            frame = groups[name]
            y = frame[column].to_numpy(dtype=float)
            if column == "kv_blocks_used" and kv_total:
                y = 100 * y / kv_total
            colour, style = line_style(i)
            label = name if roles is None else f"{name} ({roles.get(name, '')})"
            ax.step(frame["start_s"].to_numpy(dtype=float), y, where="post", label=label,
                    linewidth=0.9, color=colour, linestyle=style)
        ax.set(title=title, ylabel=ylabel)
        top = 100 if column == "kv_blocks_used" and kv_total else max(ax.get_ylim()[1], 1)
        ax.set_ylim(-0.02 * top, top)  # a line at 0 stays visible above the axis spine
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # request counts
    if steps.empty:
        note_empty(axes[0], "no engine steps")
    elif len(names) <= MAX_LEGEND:
        # Beside all three panels (the lines are the same in each), not stretching the first.
        figure.legend(*axes[0].get_legend_handles_labels(), title="instance",
                      loc="outside right upper")
    axes[-1].set_xlabel("simulated time (s)")
    figure.suptitle("Instance state at each engine step")
    return figure


# --- throughput over time -----------------------------------------------------------------

def throughput(requests: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Completed requests/s and output tokens/s per time bin, cluster-wide."""
    figure, (req_ax, tok_ax) = new_figure(11, 6.5, 2, sharex=True)
    done = completed(requests)
    end = run_end(done, steps)
    width = bin_width(end)
    edges = bin_edges(end, width)
    finished = np.histogram(done["completion_s"].to_numpy(dtype=float), edges)[0]
    tokens = tokens_per_bin(requests, steps, edges)
    label = f"{width:g} s bins"
    req_ax.stairs(finished / width, edges, fill=True, alpha=0.7)
    req_ax.set(title=f"Completed requests per second ({label})", ylabel="requests/s")
    tok_ax.stairs(tokens / width, edges, fill=True, alpha=0.7, color="tab:orange")
    tok_ax.set(title=f"Output tokens per second ({label})", ylabel="tokens/s",
               xlabel="simulated time (s)")
    for ax in (req_ax, tok_ax):
        ax.set_xlim(0, edges[-1])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if done.empty:
        note_empty(req_ax, "no completed requests")
    figure.suptitle("Throughput over time")
    return figure


def run_end(done: pd.DataFrame, steps: pd.DataFrame) -> float:
    """The last completion or step end: where the time axis stops."""
    ends = [0.0, done["completion_s"].astype(float).max()]
    if not steps.empty:
        ends.append((steps["start_s"] + steps["duration_ms"] / US_PER_MS).astype(float).max())
    return float(np.nanmax(ends))


def tokens_per_bin(requests: pd.DataFrame, steps: pd.DataFrame, edges: np.ndarray
                   ) -> np.ndarray:
    """Output tokens made in each bin: a first token at each request's first_token_s, then
    one per decoding request at the end of each engine step. Read from the steps, not spread
    over each request's lifetime, because decode speed changes with the batch."""
    first = requests["first_token_s"].to_numpy(dtype=float)
    step_end = (steps["start_s"].to_numpy(dtype=float)
                + steps["duration_ms"].to_numpy(dtype=float) / US_PER_MS)
    decoded = steps["decode_requests"].to_numpy(dtype=float)
    return (np.histogram(first[np.isfinite(first)], edges)[0]
            + np.histogram(step_end, edges, weights=decoded)[0])
