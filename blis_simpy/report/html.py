"""The HTML report of finished runs (`blis-simpy report OUTDIR --html`, `compare ... --html`):
one self-contained file, the plotting library's JavaScript and every plot's data inside it, so
it opens with no network and no server.

Plots are Bokeh's (the `plots` extra): of the libraries that ship their JavaScript in their
Python package, its inlined bundle is 1.3 MB against Plotly's 4.8 MB, and it encodes numpy
columns as binary (18 bytes a point, against Vega-Altair's 51 as JSON rows; docs/hand-rolled.md
has the measurements). Bokeh is imported only here. Tables are plain HTML. Every plot sits in
a `<div class="plot">`, which the browser test counts against the canvases drawn.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import check_replaceable, replacing
from blis_simpy.report import (
    TABLE_FORMATS,
    json_object,
    kv_blocks_total,
    load_summary,
    read_table,
    run_folder,
)
from blis_simpy.report.compare import state, window_text
from blis_simpy.report.pd_plots import QUEUE_COLUMNS, ROLE_COLUMNS, pool_busy_share
from blis_simpy.report.plots import (
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    bin_edges,
    bin_width,
    completed,
    ecdf,
    natural_key,
    run_end,
    slo_classes,
    tokens_per_bin,
)
from blis_simpy.report.scaling import REPLICA_COLUMNS
from blis_simpy.report.tier_plots import TIER_COLUMNS

if TYPE_CHECKING:
    from bokeh.models import Model
    from bokeh.plotting import figure as Figure

MAX_POINTS = 2000  # per line of a time series: longer ones keep each bin's maximum
MAX_ANOMALIES = 20  # the most severe episodes listed
WIDTH, HEIGHT = 900, 260
TOOLS = "pan,wheel_zoom,box_zoom,reset,save,hover"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
DASHES = ("solid", "dashed", "dotted", "dashdot")
SUMMARY_KEYS = (
    ("completed_requests", "completed requests"), ("rejected_requests", "rejected"),
    ("timed_out_requests", "timed out"), ("still_queued", "still queued"),
    ("still_running", "still running"), ("responses_per_sec", "requests/s"),
    ("tokens_per_sec", "output tokens/s"), ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"), ("itl_p50_ms", "ITL p50 (ms)"),
    ("itl_p99_ms", "ITL p99 (ms)"), ("e2e_p50_ms", "E2E p50 (ms)"),
    ("e2e_p99_ms", "E2E p99 (ms)"), ("cache_hit_rate", "cache hit rate"),
    ("preemption_count", "preemptions"),
)
METRIC_KEYS = (("slo_attainment", "SLO attainment"), ("goodput_per_s", "goodput (req/s)"),
               ("jain_fairness", "fairness (Jain)"))
# summary.json's speculation section (runs with engine.speculative), one row per tenant too
SPECULATION_COLUMNS = (
    ("configured_acceptance_rate", "configured acceptance"),
    ("acceptance_rate", "measured acceptance"), ("expected_acceptance_rate", "expected"),
    ("tokens_per_verify_step", "tokens per verify step"),
    ("expected_tokens_per_step", "expected"), ("drafted_tokens", "drafted"),
    ("accepted_tokens", "accepted"))
SPECULATION_KEYS = (("speculation.acceptance_rate", "speculation acceptance"),
                    ("speculation.tokens_per_verify_step", "tokens per verify step"))
GROUP_COLUMNS = (("requests", "requests"), ("completed", "completed"),
                 ("slo_attainment", "SLO attainment"), ("ttft_p99_ms", "TTFT p99 (ms)"),
                 ("tpot_p99_ms", "TPOT p99 (ms)"), ("e2e_p99_ms", "E2E p99 (ms)"))


@dataclass
class Run:
    """One run folder read back: what every section of the report draws from."""

    name: str
    path: Path
    summary: dict[str, Any]
    metrics: dict[str, Any]
    requests: pd.DataFrame
    steps: pd.DataFrame
    kv_total: int | None

    @classmethod
    def read(cls, path: Path) -> Run:
        summary = load_summary(path)
        metrics_file = run_folder(path) / "metrics.json"
        metrics = json_object(metrics_file) if metrics_file.is_file() else {}
        return cls(path.name or str(path), path, summary, metrics,
                   read_table(path, "requests", REQUEST_COLUMNS),
                   read_table(path, "steps", STEP_COLUMNS), kv_blocks_total(path))

    def has(self, table: str) -> bool:
        return any((self.path / f"{table}.{fmt}").is_file() for fmt in TABLE_FORMATS)


def bokeh() -> Any:
    """The bokeh module, or the input error that tells how to install it."""
    try:
        import bokeh
        import bokeh.embed
        import bokeh.plotting
        import bokeh.resources
    except ImportError:
        raise ScenarioError("--html", "bokeh is not installed: install blis-simpy[plots]"
                            ) from None
    return bokeh


# ---------------------------------------------------------------------------- entry points

HTML_FILE = "a file name, e.g. report.html"


def check_target(out: Path, force: bool, field: str) -> None:
    """Said before the report is built, not after: a folder, a special file, or an existing
    file without `force` is refused (a folder the file goes in is made)."""
    if out.parent.is_dir():
        check_replaceable(out, field, HTML_FILE, force)


def render_html(run_dir: Path, out: Path, force: bool = False) -> Path:
    """Write the report of the run in `run_dir` to `out` (one HTML file)."""
    bokeh()
    check_target(out, force, "--out")
    run = Run.read(run_dir)
    page = Page(f"blis-simpy report: {run.name}")
    page.text(f"<p class='where'>{esc(str(run.path))}</p>")
    page.heading("Summary")
    pairs = [(label, cell(value(run, key))) for key, label in (*SUMMARY_KEYS, *METRIC_KEYS)]
    per_row = 3  # label, value, label, value, ...: a short table, not a long column
    page.table([], [[c for pair in pairs[i:i + per_row] for c in pair]
                    for i in range(0, len(pairs), per_row)])
    warnings = run.summary.get("warnings") or []
    if warnings:
        page.text("<ul class='warnings'>" + "".join(f"<li>{esc(str(w))}</li>" for w in warnings)
                  + "</ul>")
    speculation(page, run.summary.get("speculation"))
    page.heading("SLO attainment")
    for key, title in (("per_slo_class", "SLO class"), ("per_tenant", "tenant")):
        groups = run.metrics.get(key) or {}
        if groups:
            shown = busiest(groups)
            page.table([title, *(label for _, label in GROUP_COLUMNS)],
                       [[name or "default", *(cell(row.get(k)) for k, _ in GROUP_COLUMNS)]
                        for name, row in shown.items()])
            if len(shown) < len(groups):
                page.text(f"<p class='where'>the {len(shown)} {esc(title)}s with the most "
                          f"requests of {len(groups):,}; metrics.json ({esc(key)}) has every "
                          "one</p>")
    page.heading("Latency distributions")
    for column, title in LATENCIES:
        page.plot(cdf_plot(title, [(label, frame[column]) for label, frame in
                                   slo_classes(completed(run.requests))], "SLO class"))
    page.heading("Over time")
    x_range = shared_range(run_end(completed(run.requests), run.steps))
    for plot in time_series(run, x_range):
        page.plot(plot)
    page.heading("Anomalies")
    page.text(anomalies(run))
    page.heading("Trace summary")
    page.text(trace_summary(run))
    return page.write(out, force)


def compare_html(run_dirs: Sequence[Path], out: Path, force: bool = False) -> Path:
    """Write two or more runs side by side to `out`: summaries with each run's ratio to the
    first, SLO attainment per class, and their latency CDFs and time series overlaid."""
    bokeh()
    check_target(out, force, "--html")
    runs = [Run.read(path) for path in run_dirs]
    names = unique_names(runs)
    page = Page("blis-simpy comparison: " + " vs ".join(names))
    page.text("<p class='where'>" + "<br>".join(f"{esc(n)}: {esc(str(r.path))}"
                                                for n, r in zip(names, runs, strict=True))
              + "</p>")
    page.heading("Saturation and warnings")
    states = [state(r.summary, window_text(r.path)) for r in runs]
    page.table(["run", "window", "verdict", "level", "warnings"],
               [[n, s.window, s.verdict, s.level, str(len(s.warnings))]
                for n, s in zip(names, states, strict=True)])
    for n, s in zip(names, states, strict=True):
        if s.warnings:
            page.text(f"<p>{esc(n)}:</p><ul class='warnings'>"
                      + "".join(f"<li>{esc(w)}</li>" for w in s.warnings) + "</ul>")
    page.heading("Summary")
    header = ["", *names, *(f"{n} / {names[0]}" for n in names[1:])]
    rows = []
    spec = SPECULATION_KEYS if any("speculation" in r.summary for r in runs) else ()
    for key, label in (*SUMMARY_KEYS, *METRIC_KEYS, *spec):
        values = [value(r, key) for r in runs]
        rows.append([label, *map(cell, values), *(cell(ratio(values[0], v)) for v in values[1:])])
    page.table(header, rows)
    page.heading("SLO attainment per SLO class")
    every = sorted({c for r in runs for c in (r.metrics.get("per_slo_class") or {})})
    counts = {c: sum(float((r.metrics.get("per_slo_class") or {}).get(c, {}).get("requests")
                           or 0) for r in runs) for c in every}
    classes = [c for c in every if c in busiest(counts_rows(counts))]
    page.table(["SLO class", *names], [
        [c or "default", *(cell((r.metrics.get("per_slo_class") or {}).get(c, {})
                                .get("slo_attainment")) for r in runs)] for c in classes])
    page.heading("Latency distributions")
    for column, title in LATENCIES:
        page.plot(cdf_plot(title, [(n, completed(r.requests)[column])
                                   for n, r in zip(names, runs, strict=True)], "run"))
    page.heading("Over time")
    end = max(run_end(completed(r.requests), r.steps) for r in runs)
    x_range = shared_range(end)
    page.plot(throughput_plot([(n, r) for n, r in zip(names, runs, strict=True)], x_range))
    page.plot(step_plot("Queue depth, all instances", "waiting requests", [
        (n, *cluster_total(r.steps, "queue_depth")) for n, r in zip(names, runs, strict=True)],
        x_range))
    page.plot(step_plot("Running batch, all instances", "running requests", [
        (n, *cluster_total(r.steps, "batch_size")) for n, r in zip(names, runs, strict=True)],
        x_range))
    return page.write(out, force)


TOP_ROWS = 50  # rows of a per-tenant or per-class table; metrics.json has them all


def counts_rows(counts: dict[str, float]) -> dict[str, Any]:
    return {name: {"requests": n} for name, n in counts.items()}


def busiest(groups: dict[str, Any], top: int = TOP_ROWS) -> dict[str, Any]:
    """The `top` groups with the most requests, in their own order (all of them when there
    are no more)."""
    if len(groups) <= top:
        return groups

    def requests(item: tuple[str, Any]) -> float:
        count: Any = item[1].get("requests") if isinstance(item[1], dict) else None
        return float(count) if numeric(count) else 0.0

    kept = {name for name, _ in sorted(groups.items(), key=lambda i: -requests(i))[:top]}
    return {name: row for name, row in groups.items() if name in kept}


def unique_names(runs: Sequence[Run]) -> list[str]:
    """Each run's folder name, with its position added where two share one."""
    names = [r.name for r in runs]
    return [f"{n} ({i + 1})" if names.count(n) > 1 else n for i, n in enumerate(names)]


# ---------------------------------------------------------------------------- the page

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
.pairs td:nth-child(odd) { text-align: left; background: #f4f4f4; }
.where { color: #666; font-size: 0.85em; }
.plot { margin: 1em 0; }
.warnings li { color: #a33; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.85em; }
"""


class Page:
    """Headings, tables and plots in order; `write` embeds the plots with Bokeh's inline
    resources (its JavaScript in the file, no CDN)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str | int] = []  # HTML, or the index of a plot
        self.plots: list[Model] = []

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{esc(text)}</h2>")

    def text(self, markup: str) -> None:
        self.parts.append(markup)

    def table(self, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        head = "".join(f"<th>{esc(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                       for row in rows)
        head = f"<thead><tr>{head}</tr></thead>" if header else ""
        self.parts.append(f"<table class='{'' if header else 'pairs'}'>{head}<tbody>{body}"
                          "</tbody></table>")

    def plot(self, model: Model) -> None:
        self.parts.append(len(self.plots))
        self.plots.append(model)

    def html(self) -> str:
        from bokeh.embed import components
        from bokeh.resources import Resources

        # only the core bundle: no WebGL, widgets, tables or MathJax (2.7 MB the report
        # does not use)
        resources = Resources(mode="inline", components=["bokeh"])
        script, divs = stable_ids(*components(self.plots)) if self.plots else ("", ())
        body = "\n".join(part if isinstance(part, str) else
                         f"<div class='plot'>{divs[part]}</div>" for part in self.parts)
        return (f"<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
                f"<title>{esc(self.title)}</title>\n<style>{STYLE}</style>\n"
                f"{resources.render_js()}\n{script}\n</head>\n<body>\n<h1>{esc(self.title)}</h1>\n"
                f"{body}\n</body>\n</html>\n")

    def write(self, out: Path, force: bool = False) -> Path:
        """The file, written whole or not at all (`replacing`: a temporary beside it, then
        renamed); an existing one only with `force`, and never a folder or special file."""
        text = self.html()
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ScenarioError(str(out), f"cannot write: {exc.strerror or exc}") from None
        with replacing(out, str(out), HTML_FILE, force) as temp:
            temp.write_text(text, encoding="utf-8")
        return out


UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def stable_ids(script: str, divs: Sequence[str]) -> tuple[str, list[str]]:
    """Bokeh's ids made the same on every report of the same folder: its document and element
    ids are random UUIDs, its model ids a counter that runs on across the reports one process
    writes. Each is renamed by the order it first appears in, so the file is byte-identical
    run to run. Only ids Bokeh gave are renamed (the document's, each plot's element and every
    model's `"id"`), never a string of the data that looks like one."""
    page = script + "".join(divs)
    models = dict.fromkeys(re.findall(r'"id":"(p\d+)"', script)
                           + re.findall(r'data-root-id="(p\d+)"', page))
    model_ids = {old: f"m{n}" for n, old in enumerate(models)}
    generated = dict.fromkeys(re.findall(rf'<div id="({UUID})"', page)
                              + re.findall(rf'"docid":"({UUID})"', script))
    uuids = {old: f"00000000-0000-4000-8000-{n:012x}" for n, old in enumerate(generated)}

    def rename(text: str) -> str:
        text = re.sub(r'"(p\d+)"', lambda m: f'"{model_ids.get(m.group(1), m.group(1))}"',
                      text)
        return re.sub(UUID, lambda m: uuids.get(m.group(0), m.group(0)), text)

    return rename(script), [rename(div) for div in divs]


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def value(run: Run, key: str) -> Any:
    section, _, inner = key.partition(".")
    if inner:  # a figure of a summary section (speculation.acceptance_rate)
        return (run.summary.get(section) or {}).get(inner)
    return run.summary[key] if key in run.summary else run.metrics.get(key)


def speculation(page: Page, section: dict[str, Any] | None) -> None:
    """What speculative decoding did: drafts accepted against the configured rate, overall
    and per tenant (a tenant's own acceptance rate)."""
    if not section:
        return
    page.heading("Speculative decoding")
    draft = f", draft model {esc(str(section['draft_model']))}" \
        if section.get("draft_model") else ""
    page.text(f"<p>{esc(str(section.get('method')))}, {cell(section.get('draft_tokens'))} "
              f"draft tokens a step{draft}</p>")
    rows = [("all", section), *sorted((section.get("by_tenant") or {}).items())]
    page.table(["", *(label for _, label in SPECULATION_COLUMNS)],
               [[str(name), *(cell(row.get(k)) for k, _ in SPECULATION_COLUMNS)]
                for name, row in rows])


def numeric(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return str(x)


def ratio(a: Any, b: Any) -> float | None:
    if not (numeric(a) and numeric(b)) or a == 0:
        return None
    r = b / a
    return r if math.isfinite(r) else None


# ---------------------------------------------------------------------------- plots

LATENCIES = (("ttft_ms", "Time to first token (ms)"), ("e2e_ms", "End-to-end latency (ms)"),
             ("itl_mean_ms", "Mean inter-token latency per request (ms)"))


def new_plot(title: str, x_label: str, y_label: str, x_range: Any = None) -> Figure:
    from bokeh.plotting import figure

    kwargs = {} if x_range is None else {"x_range": x_range}
    plot = figure(title=title, width=WIDTH, height=HEIGHT, tools=TOOLS,
                  active_scroll="wheel_zoom", x_axis_label=x_label, y_axis_label=y_label,
                  **kwargs)
    plot.toolbar.logo = None
    return plot


def finish(plot: Figure, legend_title: str, where: Any = "top_left") -> Figure:
    if plot.legend:
        plot.legend.title = legend_title
        plot.legend.click_policy = "hide"  # a click on an entry hides its line
        plot.legend.location = where
    return plot


def style(i: int) -> dict[str, Any]:
    return {"color": PALETTE[i % len(PALETTE)], "line_dash": DASHES[(i // len(PALETTE))
                                                                     % len(DASHES)]}


def shared_range(end: float) -> Any:
    from bokeh.models import Range1d

    return Range1d(start=0, end=max(end, 1e-3))


def cdf_plot(title: str, groups: Sequence[tuple[str, pd.Series]], legend: str) -> Figure:
    plot = new_plot(f"{title}: CDF", title.split(" (")[0] + " (ms)", "fraction of requests")
    for i, (label, values) in enumerate(groups):
        x, y = ecdf(values.to_numpy(dtype=float))
        if len(x):
            x, y = thin(x, y)
            plot.step(x, y, mode="after", legend_label=f"{label} (n={len(values)})",
                      line_width=1.5, **style(i))
    return finish(plot, legend, "bottom_right")


def thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sorted curve cut to at most MAX_POINTS points, the last kept."""
    if len(x) <= MAX_POINTS:
        return x, y
    keep = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).astype(int))
    return x[keep], y[keep]


def binned_max(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step series of at most MAX_POINTS points: each time bin's largest value (a peak
    never disappears into an average)."""
    if len(times) <= MAX_POINTS:
        return times, values
    edges = np.linspace(times.min(), times.max(), MAX_POINTS + 1)
    index = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, MAX_POINTS - 1)
    peak = np.full(MAX_POINTS, -np.inf)
    np.maximum.at(peak, index, values)
    seen = np.isfinite(peak)
    return edges[:-1][seen], peak[seen]


def step_plot(title: str, y_label: str,
              lines: Sequence[tuple[str, np.ndarray, np.ndarray]], x_range: Any,
              legend: str = "run") -> Figure:
    plot = new_plot(title, "simulated time (s)", y_label, x_range)
    for i, (label, times, values) in enumerate(lines):
        if len(times):
            x, y = binned_max(times, values)
            plot.step(x, y, mode="after", legend_label=label, line_width=1.2, **style(i))
    return finish(plot, legend)


def per_instance(steps: pd.DataFrame, column: str, scale: float = 1.0
                 ) -> list[tuple[str, np.ndarray, np.ndarray]]:
    groups = dict(list(steps.groupby(steps["instance"].astype(str), sort=False)))
    return [(name, groups[name]["start_s"].to_numpy(dtype=float),
             scale * groups[name][column].to_numpy(dtype=float))
            for name in sorted(groups, key=natural_key)]


def cluster_total(steps: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """The sum over instances of each one's latest value, at every step start."""
    if steps.empty:
        return np.array([]), np.array([])
    frame = steps.sort_values("start_s", kind="stable")
    change = frame.groupby(frame["instance"].astype(str))[column].diff().fillna(frame[column])
    return frame["start_s"].to_numpy(dtype=float), np.cumsum(change.to_numpy(dtype=float))


def throughput_plot(runs: Sequence[tuple[str, Run]], x_range: Any) -> Figure:
    end = max(run_end(completed(r.requests), r.steps) for _, r in runs)
    width = bin_width(end)
    edges = bin_edges(end, width)
    plot = new_plot(f"Output tokens per second ({width:g} s bins)", "simulated time (s)",
                    "tokens/s", x_range)
    for i, (label, run) in enumerate(runs):
        tokens = tokens_per_bin(run.requests, run.steps, edges) / width
        plot.step(edges[:-1], tokens, mode="after", legend_label=label, line_width=1.2,
                  **style(i))
    return finish(plot, "run")


def requests_plot(run: Run, x_range: Any) -> Figure:
    done = completed(run.requests)
    end = run_end(done, run.steps)
    width = bin_width(end)
    edges = bin_edges(end, width)
    plot = new_plot(f"Requests per second ({width:g} s bins)", "simulated time (s)",
                    "requests/s", x_range)
    series = (("arrived", run.requests["arrival_s"]), ("completed", done["completion_s"]))
    for i, (label, times) in enumerate(series):
        values = times.to_numpy(dtype=float)
        counts = np.histogram(values[np.isfinite(values)], edges)[0] / width
        plot.step(edges[:-1], counts, mode="after", legend_label=label, line_width=1.2,
                  **style(i))
    return finish(plot, "requests")


def time_series(run: Run, x_range: Any) -> list[Figure]:
    """Queue, batch and KV per instance, throughput, and what the run's features add:
    replicas, P/D pools, KV tiers."""
    kv_scale = 100 / run.kv_total if run.kv_total else 1.0
    kv_label = "KV blocks used (%)" if run.kv_total else "KV blocks used"
    plots = [
        requests_plot(run, x_range),
        throughput_plot([("output tokens", run)], x_range),
        step_plot("Queue depth per instance", "waiting requests",
                  per_instance(run.steps, "queue_depth"), x_range, "instance"),
        step_plot("Running batch per instance", "running requests",
                  per_instance(run.steps, "batch_size"), x_range, "instance"),
        step_plot("KV cache use per instance", kv_label,
                  per_instance(run.steps, "kv_blocks_used", kv_scale), x_range, "instance"),
    ]
    for table, build in OPTIONAL:
        if run.has(table):
            plots.append(build(run, x_range))
    if isinstance(run.summary.get("kv_tiers"), dict):
        plots.append(tier_plot(run, x_range))
    return plots


def replica_plot(run: Run, x_range: Any) -> Figure:
    table = read_table(run.path, "replicas", REPLICA_COLUMNS)
    lines = []
    for config, frame in table.groupby("config", sort=False):
        times = frame["time_s"].to_numpy(dtype=float)
        lines.append((f"{config}", times, frame["replicas"].to_numpy(dtype=float)))
        lines.append((f"{config} (taking traffic)", times,
                      frame["routable"].to_numpy(dtype=float)))
    return step_plot("Replicas per deployment config", "replicas", lines, x_range, "config")


def pd_plot(run: Run, x_range: Any) -> Any:
    """Each pool's busy share per time bin, and the KV handoffs waiting for their link."""
    from bokeh.layouts import column

    edges, width, pools = pool_busy_share(read_table(run.path, "instances", ROLE_COLUMNS))
    busy = new_plot(f"P/D pool busy share ({width:g} s bins)", "simulated time (s)",
                    "busy share", x_range)
    for i, (role, (count, share)) in enumerate(pools.items()):
        busy.step(edges[:-1], share, mode="after", legend_label=f"{role} ({count})",
                  line_width=1.2, **style(i))
    queue = read_table(run.path, "transfer_queue", QUEUE_COLUMNS)
    waiting = step_plot("KV handoffs waiting for their link", "handoffs", [
        ("waiting", queue["time_s"].to_numpy(dtype=float),
         queue["waiting_transfers"].to_numpy(dtype=float))], x_range, "handoffs")
    return column(finish(busy, "pool"), waiting)


def tier_plot(run: Run, x_range: Any) -> Figure:
    table = read_table(run.path, "instances", TIER_COLUMNS)
    lines = []
    for name, frame in sorted(table.groupby(table["instance"].astype(str)),
                              key=lambda g: natural_key(g[0])):
        times = frame["time_s"].to_numpy(dtype=float)
        for col, tier in (("kv_utilization", "GPU"), ("kv_cpu_utilization", "CPU"),
                          ("kv_storage_utilization", "storage")):
            values = frame[col].to_numpy(dtype=float)
            if tier == "GPU" or values.any():
                lines.append((f"{name} {tier}", times, 100 * values))
    return step_plot("KV tier use per instance", "blocks used (%)", lines, x_range, "tier")


OPTIONAL: tuple[tuple[str, Callable[[Run, Any], Any]], ...] = (
    ("replicas", replica_plot), ("transfers", pd_plot))


# ---------------------------------------------------------------------------- text sections

def anomalies(run: Run) -> str:
    counts = run.metrics.get("anomalies") or {}
    if not any(counts.values()) if isinstance(counts, dict) else not counts:
        return "<p>No anomalies.</p>"
    parts = ["<table><thead><tr><th>kind</th><th>count</th></tr></thead><tbody>"]
    parts += [f"<tr><td>{esc(str(k))}</td><td>{cell(v)}</td></tr>"
              for k, v in counts.items() if v]
    parts.append("</tbody></table>")
    if run.has("anomalies"):
        table = read_table(run.path, "anomalies", ("time_s", "type", "instance", "detail",
                                                   "severity"))
        worst = table.sort_values(["severity", "time_s"], ascending=[False, True],
                                  kind="stable").head(MAX_ANOMALIES)
        columns = ("time_s", "type", "instance", "severity", "detail")
        parts.append(f"<p>The {len(worst)} most severe of {len(table)}:</p><table><thead><tr>"
                     + "".join(f"<th>{c}</th>" for c in columns) + "</tr></thead><tbody>")
        for row in worst.itertuples(index=False):
            parts.append("<tr>" + "".join(f"<td>{esc(cell(blank(getattr(row, c))))}</td>"
                                          for c in columns) + "</tr>")
        parts.append("</tbody></table>")
    return "".join(parts)


def blank(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else x


def trace_summary(run: Run) -> str:
    """The Markdown `blis-simpy summarize` prints, as preformatted text."""
    from blis_simpy.report.trace_summary import summarize

    try:
        text = summarize(run.path)
    except ScenarioError as exc:
        return f"<p>No trace summary: {esc(str(exc))}</p>"
    return f"<pre>{esc(text)}</pre>"
