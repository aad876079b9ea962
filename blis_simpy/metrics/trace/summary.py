"""The trace summary (design §11): a bounded Markdown text that tells a person, or a reflecting
LLM in a policy search (GEPA, OpenEvolve), why a run scored as it did.

`summary_text(inputs, max_tokens, strategy)` reads only a finished run's tables and JSON
(`TraceInputs`, from a `Result` or an output folder), so the same run always gives the same
text. Strategies choose the sections:

* `issue_focused` (default): outcome, key issues with examples, counterfactuals, worst
  decisions, suggested focus;
* `decision_audit`: outcome, how the routing decisions fared, sampled decisions with their
  outcomes, focus;
* `counterfactual`: outcome, regret in detail, the decisions with most regret, focus;
* `pattern_mining`: outcome, request features over-represented among poor outcomes, focus.

Size: a token is counted as 4 characters; sections are filled in order of importance until
`max_tokens` is reached, then printed in document order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from blis_simpy.core.request import RejectCode
from blis_simpy.metrics.columns import Table, plain
from blis_simpy.metrics.saturation import BACKLOGGED, OVERLOADED, spans, spread_capacity

if TYPE_CHECKING:
    import pandas as pd

STRATEGIES = ("issue_focused", "decision_audit", "counterfactual", "pattern_mining")
CHARS_PER_TOKEN = 4
MIN_TOKENS = 100


class Rows:
    """A table as the summary reads it, without pandas (a sweep's workers never import it):
    columns by name as numpy arrays, the text ones as str ("" where empty), from a run's
    `Table` or a DataFrame read from its files, each made the first time it is read (a few
    of the requests' thirty are). `rows.name` and `rows["name"]` are a column, `rows[mask]`
    the rows picked; `frame()` a DataFrame, for the sections that group by many columns
    (pattern_mining)."""

    __slots__ = ("length", "made", "picked", "source", "text")

    def __init__(self, source: Table | pd.DataFrame, text: Sequence[str],
                 picked: np.ndarray | None = None) -> None:
        self.source = source
        self.text = frozenset(text)  # made text however the table was read (a CSV reader
        # turns "True" into a bool and "" into NaN)
        self.picked = picked  # the rows of the source, in order (None: all)
        self.length = len(source) if picked is None else len(picked)
        self.made: dict[str, np.ndarray] = {}

    def names(self) -> list[str]:
        source = self.source
        return list(source.columns) if isinstance(source, Table) else \
            [str(name) for name in source.columns]

    def column(self, name: str) -> np.ndarray:
        made = self.made.get(name)
        if made is None:
            source = self.source
            values = plain(source.columns[name]) if isinstance(source, Table) \
                else source[name].to_numpy()
            made = as_text(values) if name in self.text else np.asarray(values)
            if self.picked is not None:
                made = made[self.picked]
            self.made[name] = made
        return made

    def __len__(self) -> int:
        return self.length

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.column(key)
        picked = np.flatnonzero(key) if self.picked is None else self.picked[key]
        return Rows(self.source, tuple(self.text), picked)

    def __getattr__(self, name: str) -> np.ndarray:
        if name in Rows.__slots__:  # (not set yet)
            raise AttributeError(name)
        try:
            return self.column(name)
        except KeyError:
            raise AttributeError(name) from None

    def row(self, index: int) -> dict[str, Any]:
        return {name: self.column(name)[index] for name in self.names()}

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({name: values.tolist() if values.dtype == object else values
                             for name in self.names()
                             for values in [self.column(name)]})


def as_text(values: Iterable[Any]) -> np.ndarray:
    """A text column's values as str: "" for a missing one (None, NaN), str() of the rest."""
    texts = [v if isinstance(v, str) else "" if v is None or v != v else str(v)
             for v in values]
    out = np.empty(len(texts), dtype=object)
    out[:] = texts
    return out


@dataclass(frozen=True)
class TraceInputs:
    """What a summary reads: summary.json, metrics.json, the requests and anomalies tables
    (`Rows`), the decisions (a DataFrame; None when the run was not traced) and the resolved
    scenario."""

    summary: dict[str, Any]
    metrics: dict[str, Any]
    requests: Rows
    anomalies: Rows | None
    decisions: pd.DataFrame | None
    scenario: dict[str, Any]

    @classmethod
    def of(cls, summary: dict[str, Any], metrics: dict[str, Any],
           requests: Table | pd.DataFrame, anomalies: Table | pd.DataFrame | None,
           decisions: Table | pd.DataFrame | None, scenario: dict[str, Any]) -> TraceInputs:
        """The inputs within the measurement window, with every text column as text (a run's
        tables, or as read from its files). Only decisions make this import pandas."""
        start, end = window_of(scenario)
        rows = within(Rows(requests, TEXT_COLUMNS["requests"]), "arrival_s", start, end)
        found = None if anomalies is None else Rows(anomalies, TEXT_COLUMNS["anomalies"])
        if found is not None and (start or end is not None):
            # a violation belongs to its request (measured by arrival), the rest by time
            judged = found.type == "slo_violation"
            ids = set(rows.id.tolist())
            theirs = np.array([r in ids for r in found.requests.tolist()], dtype=bool)
            found = found[judged & theirs | ~judged & in_window(found.time_s, start, end)]
        if decisions is not None:
            frame = decisions.frame() if isinstance(decisions, Table) else decisions
            decisions = text_frame(within(frame, "time_s", start, end), "decisions")
        return cls(summary, metrics, rows, found, decisions, scenario)

    @property
    def routing(self) -> pd.DataFrame | None:
        d = self.decisions
        return None if d is None else d[d.stage == "routing"]


TEXT_COLUMNS = {
    "requests": ("id", "instance", "tenant", "slo_class", "final_state"),
    "anomalies": ("type", "instance", "requests", "detail"),
    "decisions": ("request", "stage", "outcome", "instance", "reason", "tenant", "slo_class",
                  "prefix_hash", "filtered", "top_candidates", "scores", "seen",
                  "expected_cache_hit", "best_alternative", "cache_hit", "cache_tier",
                  "final_state"),
}


def window_of(scenario: dict[str, Any]) -> tuple[float, float | None]:
    """The run's measurement window (evaluation.window), in seconds."""
    window = (scenario.get("evaluation") or {}).get("window") or {}
    return float(window.get("warmup_s") or 0.0), window.get("end_s")


def in_window(times: Any, start: float, end: float | None) -> Any:
    keep = times >= start
    if end is not None:
        keep &= times < end
    return keep


def within(frame: Any, column: str, start: float, end: float | None) -> Any:
    """The rows (of `Rows` or a DataFrame) whose `column` time lies in the measurement
    window (all of them by default): the summary describes what the metrics measured."""
    if start == 0 and end is None:
        return frame
    return frame[in_window(frame[column], start, end)]


def text_frame(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    frame = frame.copy()
    for name in TEXT_COLUMNS[table]:
        if name in frame and not all_text(frame[name]):
            frame[name] = as_text(frame[name]).tolist()
    return frame


def all_text(column: pd.Series) -> bool:
    """Every value a string already (a fresh run's tables): checked in C, not per value."""
    from pandas.api.types import is_string_dtype

    return is_string_dtype(column) and not column.isna().any()


def tally(values: Iterable[Any]) -> dict[Any, int]:
    """How often each value occurs, most first, ties in the order they first occur (as
    pandas' `value_counts`)."""
    return dict(Counter(values).most_common())


def quantile(values: np.ndarray, q: float) -> float:
    """The `q` quantile of the values that are not NaN, interpolated linearly as pandas'
    groupby does it (its rounding, not numpy's); NaN when there are none."""
    x = np.sort(values[~np.isnan(values)])
    if not len(x):
        return math.nan
    position = q * (len(x) - 1)
    low = math.floor(position)
    high = min(low + 1, len(x) - 1)
    return float(x[low] + (x[high] - x[low]) * (position - low))


def worst_of(rows: Rows) -> SimpleNamespace:
    """The row of highest severity, the earliest of those (the first of full ties)."""
    return SimpleNamespace(**rows.row(int(np.lexsort((rows.time_s, -rows.severity))[0])))


@dataclass(frozen=True)
class Issue:
    area: str  # RUN, ROUTING, FAIRNESS, SLO, CAPACITY, CONFIG, CACHE, KV, ANOMALY
    headline: str
    evidence: tuple[str, ...]
    impact: float  # ranks the issues (higher first)
    focus: str  # one suggested change


@dataclass
class Section:
    title: str
    rank: int  # lower = filled first when the budget is short
    lines: list[str] = field(default_factory=list)


def summary_text(inputs: TraceInputs, max_tokens: int = 1000,
                 strategy: str = "issue_focused") -> str:
    """The Markdown summary of a run (module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown summary strategy {strategy!r}; valid: "
                         + ", ".join(STRATEGIES))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) \
            or max_tokens < MIN_TOKENS:
        raise ValueError(f"max_tokens must be an integer >= {MIN_TOKENS}, got {max_tokens!r}")
    issues = find_issues(inputs)
    sections = BUILDERS[strategy](inputs, issues)
    head = verdict_line(inputs)
    return head + fit(sections, max_tokens * CHARS_PER_TOKEN - len(head))


def verdict_line(inputs: TraceInputs) -> str:
    """The first line when the run was saturated: every other figure describes a growing
    queue, so it comes before them ("" otherwise)."""
    sat = inputs.summary.get("saturation") or {}
    if sat.get("verdict") != "saturated":
        return ""
    best = sat.get("max_sustainable_rate_per_s")
    return (f"**SATURATED**: offered {sat['offered_rate_per_s']:.3g} req/s, served "
            f"{sat['served_rate_per_s']:.3g} req/s; " + queue_evidence(sat)
            + (f"; {sat['unserved']}" if "unserved" in sat
               else f"; about {best:.3g} req/s was sustained" if best and "reason" not in sat
               else f"; the step-cost model allows about {best:.3g} req/s" if best else "")
            + (". The latencies below describe only the requests served.\n\n"
               if "unserved" in sat else
               ". The latencies below describe a growing queue, not a steady state.\n\n"
               if "reason" not in sat else ". The latencies below describe an overload that "
               "had not yet shown in the queue, not a steady state.\n\n"))


def queue_evidence(sat: dict[str, Any]) -> str:
    """What showed the saturation: the wait queue's growth, or (it did not grow within the
    span) the offered load against the step-cost model's capacity."""
    if "reason" in sat:
        return sat["reason"]
    return (f"the wait queue grew by {sat['queue_growth_per_s']:.3g} req/s "
            f"({sat['waiting_at_end']} waiting at t={sat['span_s'][1]:.4g} s)")


def fit(sections: list[Section], budget: int) -> str:
    """The sections in document order, each with as many of its lines as fit after the more
    important sections took theirs."""
    kept: dict[int, list[str]] = {}
    used = 0
    for index in sorted(range(len(sections)), key=lambda i: (sections[i].rank, i)):
        section = sections[index]
        head = f"## {section.title}\n"
        if not section.lines or used + len(head) > budget:
            continue
        lines: list[str] = []
        cost = len(head)
        for line in section.lines:
            if used + cost + len(line) + 1 > budget:
                break
            lines.append(line)
            cost += len(line) + 1
        if lines:
            kept[index] = lines
            used += cost + 1
    return "\n".join(f"## {sections[i].title}\n" + "\n".join(kept[i]) + "\n"
                     for i in sorted(kept))


# ---------------------------------------------------------------- formatting


def pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.1 or x == 0 else f"{100 * x:.1f}%"


def ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x / 1000:.2f} s" if x >= 10_000 else f"{x:.0f} ms"


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def targets_of(inputs: TraceInputs) -> dict[str, dict[str, float]]:
    """SLO targets by tenant (their own) and by class (evaluation.slo_targets), non-null only."""
    out = {}
    workload = inputs.scenario.get("workload", {})
    for tenant in workload.get("tenants", []) or []:
        slo = {k: v for k, v in (tenant.get("slo") or {}).items() if v is not None}
        if slo:
            out[f"tenant {tenant['id']}"] = slo
    for cls, slo in (inputs.scenario.get("evaluation", {}).get("slo_targets") or {}).items():
        kept = {k: v for k, v in slo.items() if v is not None}
        if kept:
            out[f"class {cls}"] = kept
    return out


# ---------------------------------------------------------------- outcome


def instance_count(inputs: TraceInputs) -> int:
    """Instances that served: the summary lists each (a deployment's pools, every replica an
    autoscaler started); `cluster.instances` for runs written before it did."""
    listed = inputs.summary.get("instances")
    if listed:
        return len(listed)
    return int(inputs.scenario.get("cluster", {}).get("instances", 1))


def outcome(inputs: TraceInputs) -> Section:
    m, s = inputs.metrics, inputs.scenario
    section = Section("Outcome", 0)
    lines = section.lines
    policies = s.get("policies", {})
    lines.append("- Policies: " + ", ".join(f"{axis} {policies[axis]['type']}" for axis in
                                           ("admission", "priority", "routing", "scheduler")
                                           if axis in policies)
                 + f"; {plural(instance_count(inputs), 'instance')}")
    lines.append(f"- Requests: {m['completed']} completed of {m['requests']} "
                 f"({m['rejected']} rejected, {m['timed_out']} timed out)")
    start, end = window_of(s)
    if start or end is not None:
        lines.append(f"- Measured: requests arriving in [{start:g} s, "
                     + (f"{end:g} s)" if end is not None else "the end)")
                     + " (evaluation.window); rates over that time")
    goodput = m.get("goodput_per_s")
    lines.append(f"- Throughput: {m['output_tokens_per_s']:.0f} output tok/s, "
                 f"{m['requests_per_s']:.2f} req/s"
                 + (f", goodput {goodput:.2f} req/s" if goodput is not None else ""))
    lines.extend(latency_lines(inputs))
    targets = targets_of(inputs)
    for scope, goal in targets.items():
        kind, _, name = scope.partition(" ")
        stats = m.get("per_tenant" if kind == "tenant" else "per_slo_class", {}).get(name)
        if not stats:
            continue
        parts = []
        for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            if key in goal:
                p99 = stats.get(key.replace("_ms", "_p99_ms"))
                ok = p99 is not None and math.isfinite(p99) and p99 <= goal[key]
                parts.append(f"{key.removesuffix('_ms').upper()} p99 {ms(p99)} (target "
                             f"{ms(goal[key])}) {mark(ok)}")
        attained = stats.get("slo_attainment")
        lines.append(f"- {scope.capitalize()}: " + ", ".join(parts)
                     + (f"; SLO attainment {pct(attained)}" if attained is not None else ""))
    if m.get("slo_attainment") is None:
        lines.append("- SLO attainment: none to report, no SLO targets are set "
                     "(evaluation.slo_targets, or a tenant's slo)")
    else:
        fairness = m.get("jain_fairness")
        lines.append(f"- SLO attainment: {pct(m['slo_attainment'])} of the requests with "
                     "targets"
                     + (f"; fairness (Jain over tenants) {fairness:.2f}"
                        if fairness is not None and len(m.get("per_tenant", {})) > 1 else ""))
    lines.append(load_line(inputs))
    lines.extend(f"- S{w[1:]}" for w in inputs.summary.get("warnings") or ()
                 if str(w).startswith("step model:"))  # the figures' trust, for the reader
    lines.append(f"- Cache hit rate {pct(m['cache_hit_rate'])}, preemptions per request "
                 f"{m['preemption_rate']:.2f}")
    return section


def latency_lines(inputs: TraceInputs) -> list[str]:
    """TTFT, TPOT, ITL and E2E p50 / p90 / p99 side by side (vLLM's serving-benchmark
    definitions, summary.json `serving_benchmark`), and why ITL's tail exceeds TPOT's when
    it does."""
    bench = inputs.summary.get("serving_benchmark")
    m = inputs.metrics
    if not bench:  # a run written before the block existed
        return [f"- Latency p99: TTFT {ms(m['ttft_p99_ms'])}, TPOT {ms(m['tpot_p99_ms'])}, "
                f"E2E {ms(m['e2e_p99_ms'])} (p50 TTFT {ms(m['ttft_p50_ms'])})"]
    cells = [f"{label} " + " / ".join(ms(bench[f"p{p}_{name}_ms"]) for p in (50, 90, 99))
             for label, name in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"),
                                 ("E2E", "e2el"))]
    lines = ["- Latency p50 / p90 / p99: " + "; ".join(cells)]
    itl, tpot = bench.get("p99_itl_ms"), bench.get("p99_tpot_ms")
    split = bench.get("itl_breakdown") or {}
    share = split.get("gaps_in_prefill_steps_share")
    if itl is not None and tpot is not None and itl > 1.5 * tpot and share:
        lines.append(f"- ITL p99 {ms(itl)} vs TPOT p99 {ms(tpot)}: {pct(share)} of token gaps "
                     "ended in a step that also prefilled another prompt (TPOT averages them "
                     "into each request's mean); steps that only decoded: ITL p99 "
                     f"{ms(split.get('p99_itl_decode_only_ms'))}")
    return lines


AT_CAPACITY = 0.05  # a headroom within +-5 % of the sustainable rate is "at capacity"


def load_line(inputs: TraceInputs) -> str:
    """Offered load against what the system sustains: the headroom, which planners read
    instead of the busy fraction (near 1 at any load with continuous batching)."""
    sat = inputs.summary.get("saturation") or {}
    offered, best = sat.get("offered_rate_per_s"), sat.get("max_sustainable_rate_per_s")
    if offered is None:
        return f"- Load: {sat.get('reason') or 'not judged'}"
    line = f"- Load: offered {offered:.3g} req/s"
    if best:
        headroom = sat["headroom"]
        line += f", about {best:.3g} req/s sustainable: " + (
            f"headroom {pct(headroom)}" if headroom >= AT_CAPACITY else
            f"at capacity (headroom {100 * headroom:.1f}%)" if headroom > -AT_CAPACITY else
            f"overloaded by {pct(-headroom)}")
    else:
        line += f" (sustainable rate not estimated: {sat.get('max_sustainable_method')})"
    if sat.get("verdict") == "saturated":
        line += ("; requests not served kept the wait queue growing" if "unserved" in sat
                 else "; the wait queue kept growing" if "reason" not in sat else
                 "; the run is too short (or its queue too bounded) to show the queue growing")
        spread = spread_capacity(sat)
        if spread:
            line += f" (about {spread:.3g} req/s with the load spread evenly)"
    return line + level_note(sat)


def level_note(sat: dict[str, Any]) -> str:
    """The saturation detector's level, with where its windows were not STABLE."""
    where = [f"{level} at {spans(sat, level)}" for level in (OVERLOADED, BACKLOGGED)
             if spans(sat, level)]
    level = sat.get("level")
    return f"; level {level}" + (f" ({'; '.join(where)})" if where else "") if level else ""


# ---------------------------------------------------------------- issues


def find_issues(inputs: TraceInputs) -> list[Issue]:
    found = []
    for detect in DETECTORS:
        found.extend(detect(inputs))
    return sorted(found, key=lambda i: (-i.impact, i.area, i.headline))


def tenant_fairness(inputs: TraceInputs) -> list[Issue]:
    per = {t: v for t, v in inputs.metrics.get("per_tenant", {}).items()
           if v.get("slo_attainment") is not None}
    if len(per) < 2:  # fairness of SLO attainment needs two tenants with targets
        return []
    ranked = sorted(per, key=lambda t: (per[t]["slo_attainment"], t))
    worst, best = ranked[0], ranked[-1]
    gap = per[best]["slo_attainment"] - per[worst]["slo_attainment"]
    jain = inputs.metrics.get("jain_fairness") or 1.0
    if gap < 0.2 and jain >= 0.9:
        return []
    req = inputs.requests
    share = {t: n / len(req) for t, n in tally(req.tenant.tolist()).items()}
    total = max(1, req.input_tokens.sum())
    tokens = {t: req.input_tokens[req.tenant == t].sum() / total for t in share}
    missed = missed_targets(inputs, req[req.tenant == worst].id)
    evidence = [f"tenant {t}: {pct(share.get(t, 0))} of requests, {pct(tokens.get(t, 0))} of "
                f"prompt tokens, SLO attainment {pct(per[t]['slo_attainment'])}, TTFT p99 "
                f"{ms(per[t]['ttft_p99_ms'])}" for t in sorted(per, key=lambda t: -share.get(t, 0))
                ][:4]
    if missed:
        evidence.append(f"{worst}'s misses: " + ", ".join(f"{k} {n}" for k, n in missed))
    heavy = max(share, key=share.__getitem__)  # the first of the most frequent
    what = missed[0][0] if missed else "its targets"
    focus = (f"Protect tenant {worst}'s {what}: "
             + ("keep its requests out of batches crowded by " if what == "tpot_ms" else
                "serve it ahead of, or isolate it from, ")
             + f"tenant {heavy}'s load (priority, per-tenant admission or routing by tenant)")
    return [Issue("FAIRNESS", f"tenant {worst} attains {pct(per[worst]['slo_attainment'])} of "
                  f"its SLO while {best} attains {pct(per[best]['slo_attainment'])} "
                  f"(Jain {jain:.2f})", tuple(evidence), 1 + gap + (1 - jain), focus)]


def missed_targets(inputs: TraceInputs, ids: Any) -> list[tuple[str, int]]:
    """Which targets the requests `ids` missed: (target, count), most first."""
    a = inputs.anomalies
    if a is None or not len(a):
        return []
    wanted = set(ids)
    counts: dict[str, int] = {}
    for requests, detail in zip(a.requests[a.type == "slo_violation"],
                                a.detail[a.type == "slo_violation"], strict=True):
        if requests in wanted:
            for part in str(detail).split("; "):
                key = part.split(" ")[0]
                counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def load_imbalance(inputs: TraceInputs) -> list[Issue]:
    routed = inputs.requests[inputs.requests.instance != ""]
    n = int(inputs.scenario.get("cluster", {}).get("instances", 1))
    if n < 2 or len(routed) < 2 * n:
        return []
    counts = tally(routed.instance.tolist())
    ids = [f"instance_{i}" for i in range(n)]
    shares = {i: counts.get(i, 0) / len(routed) for i in ids}
    top = max(ids, key=lambda i: (shares[i], -ids.index(i)))
    fair = 1 / n
    if shares[top] < 1.5 * fair:
        return []
    ttft = {i: quantile(routed.ttft_ms[routed.instance == i], 0.99) for i in counts}
    idle = [i for i in ids if shares[i] < 0.5 * fair]
    evidence = ["requests per instance: " + ", ".join(f"{i} {pct(shares[i])}" for i in ids),
                f"TTFT p99 on {top}: {ms(ttft.get(top, math.nan))}; elsewhere: "
                + ", ".join(f"{i} {ms(ttft.get(i, math.nan))}" for i in ids if i != top)]
    if idle:
        evidence.append(f"{len(idle)} of {n} instances got under half their fair share")
    policy = inputs.scenario.get("policies", {}).get("routing", {}).get("type", "?")
    return [Issue("ROUTING", f"load imbalance: {top} received {pct(shares[top])} of the "
                  f"requests (fair share {pct(fair)}) under {policy} routing",
                  tuple(evidence), 1 + (shares[top] - fair) / (1 - fair),
                  "Route by load: prefer instances with lower queue depth / effective load")]


def slo_misses(inputs: TraceInputs) -> list[Issue]:
    m, a = inputs.metrics, inputs.anomalies
    if a is None or not (a.type == "slo_violation").any():
        return []
    v = a[a.type == "slo_violation"]
    req = inputs.requests
    slo_class = dict(zip(req.id.tolist(), req.slo_class.tolist(), strict=True))
    by_class = tally(slo_class[r] for r in v.requests.tolist())
    missed = missed_targets(inputs, v.requests)
    worst = worst_of(v)
    evidence = ("by SLO class: " + ", ".join(f"{c or 'default'} {n}" for c, n in
                                            by_class.items()),
                "targets missed: " + ", ".join(f"{k} {n}" for k, n in missed),
                f"e.g. {worst.requests} at t={worst.time_s:.2f}s on {worst.instance}: "
                f"{worst.detail}")
    return [Issue("SLO", f"{len(v)} of {m['requests']} requests missed an SLO target "
                  f"(attainment {pct(m['slo_attainment'])})", evidence,
                  1 - m["slo_attainment"], f"Cut the {missed[0][0] if missed else 'latency'} "
                  "of the classes that miss")]


# What to do when requests not served saturate a fleet that could carry the load.
NOT_SERVED = ("Give clients a timeout longer than the requests take (workload timeout_s), or "
              "shed less at admission")


def not_for_capacity(inputs: TraceInputs) -> bool:
    """Saturated by requests not served while below the sustainable rate: clients gave up
    (or admission shed) before the servers ran out."""
    sat = inputs.summary.get("saturation") or {}
    return sat.get("verdict") == "saturated" and "unserved" in sat \
        and sat.get("load_factor") is not None and sat["load_factor"] < 1


def capacity(inputs: TraceInputs) -> list[Issue]:
    m = inputs.metrics
    found = []
    sat = inputs.summary.get("saturation") or {}
    unserved = not_for_capacity(inputs)
    if sat.get("verdict") == "saturated":
        factor = sat.get("load_factor")
        evidence = [f"offered {sat['offered_rate_per_s']:.3g} req/s, served "
                    f"{sat['served_rate_per_s']:.3g} req/s; " + queue_evidence(sat),
                    f"mean queue depth per instance {m['queue_depth_avg']:.1f}, TTFT p99 "
                    f"{ms(m['ttft_p99_ms'])}"]
        spread = spread_capacity(sat)
        if spread:  # the fleet could carry it, evenly
            evidence.append(f"the instances' step costs allow about {spread:.3g} req/s when "
                            "the load is spread evenly")
            found.append(Issue("CAPACITY", "saturated although the fleet could carry the "
                               "load: it is unevenly routed", tuple(evidence), 2.0,
                               "Route by load (least-loaded, or a queue-depth scorer)"))
        elif unserved:
            found.append(Issue("CAPACITY", "saturated by requests not served, not for lack of "
                               f"capacity ({factor:.2f}x the sustainable rate)",
                               tuple(evidence), 2.0, NOT_SERVED))
        else:
            need = (f"about {math.ceil(instance_count(inputs) * factor)} instances at this "
                    "request mix" if factor else "more instances")
            found.append(Issue("CAPACITY", "saturated: the offered load exceeds what the "
                               "instances sustain" + (f" ({factor:.2f}x)" if factor else ""),
                               tuple(evidence), 2.0,
                               f"Add capacity ({need}) or shed load at admission"))
    unfinished = m["requests"] - m["completed"] - m["rejected"] - m["timed_out"]
    too_long = (inputs.summary.get("rejected_by_reason") or {}).get(RejectCode.MAX_MODEL_LEN, 0)
    if too_long:
        found.append(Issue("CONFIG", f"{pct(too_long / max(1, m['requests']))} of requests "
                           "exceed engine.max_model_len and were rejected",
                           (f"{too_long} rejected as {RejectCode.MAX_MODEL_LEN}",),
                           too_long / max(1, m["requests"]) * 2,
                           "Raise engine.max_model_len, or send shorter requests"))
    lost = m["rejected"] - too_long + m["timed_out"] + unfinished
    if not lost:
        return found
    evidence = [f"{m['rejected'] - too_long} rejected, {m['timed_out']} timed out, {unfinished} "
                "unfinished at the end", f"mean queue depth {m['queue_depth_avg']:.1f}"]
    several = (len(set(inputs.requests.slo_class.tolist())) > 1
               or len(set(inputs.requests.tenant.tolist())) > 1)
    focus = (NOT_SERVED if unserved else
             "Shed or delay the least urgent class's load at admission before queues grow"
             if several else "Add instances, or KV blocks if requests are rejected as too "
             "large")
    found.append(Issue("CAPACITY", f"{pct(lost / max(1, m['requests']))} of requests did not "
                       "complete", tuple(evidence), lost / max(1, m["requests"]) * 2, focus))
    return found


def cache_misses(inputs: TraceInputs) -> list[Issue]:
    r = inputs.routing
    if r is None or not len(r):
        return []
    missed = r[(r.cache_hit == "False") & (r.best_alt_hit_tokens > 0)]
    if len(missed) < max(3, 0.05 * len(r)):
        return []
    shadow = inputs.metrics.get("shadow_kv", {})
    evidence = [f"{len(missed)} of {len(r)} decisions went where the prompt missed the cache "
                "while another instance was expected to hold its prefix",
                f"cache hit rate {pct(inputs.metrics['cache_hit_rate'])}; shadow KV accuracy "
                f"{pct(shadow.get('accuracy') or 0)}"]
    return [Issue("CACHE", f"{pct(len(missed) / len(r))} of routing decisions passed up an "
                  "expected prefix-cache hit", tuple(evidence), len(missed) / len(r),
                  "Give prefix affinity (expected cache hit) more weight when an instance "
                  "holds the prefix")]


def anomaly_types(inputs: TraceInputs) -> list[Issue]:
    a = inputs.anomalies
    if a is None or not len(a):
        return []
    out = []
    total = max(1, inputs.metrics["requests"])
    for kind in sorted(set(a.type.tolist()) - {"slo_violation"}):
        rows = a[a.type == kind]
        worst = worst_of(rows)
        where = f" on {worst.instance}" if worst.instance else ""
        severity = float(np.nanmean(rows.severity))  # (pandas' mean: NaN left out)
        out.append(Issue(
            "ANOMALY", f"{kind}: {len(rows)} occurrences, mean severity {severity:.2f}",
            (f"worst at t={worst.time_s:.2f}s{where}: {worst.detail}",),
            0.5 * severity * min(1.0, len(rows) / (0.05 * total)),
            focus_for(kind, inputs)))
    return out


PRIORITY_SCHEDULERS = ("priority-fcfs",)
CLASS_PRIORITIES = ("slo-based", "deadline-aware")


def focus_for(kind: str, inputs: TraceInputs) -> str:
    """The suggested change for an anomaly kind, grounded in what this run has: no advice to
    adopt a policy it already uses, nor to route better when there is one instance."""
    policies = inputs.scenario.get("policies", {})
    scheduler = policies.get("scheduler", {}).get("type", "fcfs")
    priority = policies.get("priority", {}).get("type", "constant")
    if kind in ("priority_inversion", "hol_blocking", "slo_class_inversion") \
            and scheduler in PRIORITY_SCHEDULERS \
            and (kind != "slo_class_inversion" or priority in CLASS_PRIORITIES):
        return ("Keep KV blocks or batch slots free for urgent requests: the queue is already "
                f"ordered by priority ({priority}, {scheduler}), so the urgent ones waited "
                "because they did not fit")
    if kind == "slo_class_inversion":
        return ("Give urgent SLO classes a higher priority (priority slo-based with "
                "scheduler priority-fcfs)")
    if kind == "overload":
        return NOT_SERVED if not_for_capacity(inputs) else ("Add capacity or shed load at "
                                                           "admission")
    if kind in ("kv_hol_blocking", "preemption_storm") and instance_count(inputs) == 1:
        return ("Give the instance more KV blocks, or admit fewer long prompts at once: with "
                "one instance there is nowhere else to route")
    return FOCUS.get(kind, f"Find what causes {kind}")


FOCUS = {
    "priority_inversion": "Order the wait queue by priority (scheduler priority-fcfs)",
    "hol_blocking": "Let high-priority requests pass the queue head (scheduler priority-fcfs)",
    "kv_hol_blocking": "Avoid routing long prompts to instances short of free KV blocks",
    "preemption_storm": "Route away from instances under KV pressure; admit less at peaks",
    "rejection_burst": "Smooth admission (token bucket) instead of rejecting bursts",
    "shadow_divergence": "Do not trust old prefix placement: weigh recency or observed hit rate",
    "kv_thrashing": "Keep a session's requests on one instance, or give its KV a larger CPU tier",
    "scale_oscillation": "Widen the autoscaler's hysteresis or lengthen its cooldown",
    "pd_backpressure": "Add decode replicas, or lower the P:D ratio",
    "instance_failure": "Keep spare replicas (N+1), retry lost requests, let the autoscaler "
                        "replace failed ones",
}

def vacuous(inputs: TraceInputs) -> list[Issue]:
    """A run in which no request completed measured nothing: said first, with the run's own
    warnings, so a reader (a reflecting LLM) never takes its empty figures for a clean run."""
    summary = inputs.summary
    if summary.get("completed_requests", 0) > 0:
        return []
    arrived = summary.get("arrived_requests", summary.get("injected_requests", 0))
    evidence = tuple(str(w) for w in (summary.get("warnings") or [])[:3]) or (
        f"{arrived} requests arrived, {summary.get('rejected_requests', 0)} were rejected",)
    return [Issue("RUN", f"no request completed ({arrived} arrived): the run measured nothing",
                  evidence, 1e9, "make the run measure something: a workload that sends "
                  "requests, admission that lets some in, a horizon long enough to finish "
                  "them")]


DETECTORS: tuple[Callable[[TraceInputs], list[Issue]], ...] = (
    vacuous, tenant_fairness, load_imbalance, slo_misses, capacity, cache_misses, anomaly_types)


def issues_section(issues: list[Issue], limit: int = 5) -> Section:
    section = Section(f"Key Issues ({len(issues)} detected)", 1)
    for n, issue in enumerate(issues[:limit], 1):
        section.lines.append(f"{n}. {issue.area}: {issue.headline}")
        section.lines.extend(f"   - {line}" for line in issue.evidence)
    if not issues:
        section.lines.append("- none: every check passed")
    return section


def focus_section(issues: list[Issue], rank: int = 2) -> Section:
    section = Section("Suggested Focus", rank)
    seen: list[str] = []
    for issue in issues:
        if issue.focus not in seen:
            seen.append(issue.focus)
    section.lines = [f"- {f}" for f in seen[:4]] or ["- keep the current policy: no issue "
                                                      "found"]
    return section


# ---------------------------------------------------------------- decisions


def no_trace(section: Section) -> Section:
    section.lines.append("- decisions were not traced: run with cluster.trace_level "
                         "decisions (--trace-level decisions)")
    return section


def counterfactual_section(inputs: TraceInputs, detailed: bool) -> Section:
    section = Section("Counterfactual Analysis", 3 if not detailed else 1)
    r = inputs.routing
    if r is None:
        return no_trace(section)
    if not len(r):
        section.lines.append("- no routing decisions")
        return section
    lines = section.lines
    regret = r.ttft_regret_ms.fillna(0)
    positive = regret[regret > 0]
    lines.append(f"- Routing regret: avg {regret.mean():.1f} ms of estimated TTFT per decision "
                 f"({len(positive)} of {len(r)} decisions had a better alternative)")
    if detailed and len(positive):
        lines.append(f"- Of those: p50 {ms(float(positive.median()))}, p90 "
                     f"{ms(float(positive.quantile(0.9)))}, max {ms(float(positive.max()))}; "
                     "total "
                     f"{positive.sum() / 1000:.1f} s of estimated TTFT")
        by_target = r[regret > 0].groupby("instance").size().sort_values(ascending=False)
        lines.append("- Regretted decisions by chosen instance: " + ", ".join(
            f"{i} {n}" for i, n in by_target.head(4).items()))
        if "tenant" in r and r.tenant.nunique() > 1:
            by_tenant = r.assign(regret=regret).groupby("tenant").regret.mean()
            lines.append("- Avg regret by tenant: " + ", ".join(
                f"{t} {v:.1f} ms" for t, v in by_tenant.sort_index().items()))
    score = r.score_regret.fillna(0)
    if (score > 0).any():
        lines.append(f"- Score regret: {int((score > 0).sum())} decisions did not pick the "
                     f"policy's own best score (avg {score.mean():.3g})")
    missed = r[(r.cache_hit == "False") & (r.best_alt_hit_tokens > 0)]
    lines.append(f"- {len(missed)} decisions where an alternative was expected to hit the cache "
                 "(chosen missed)")
    shadow = inputs.metrics.get("shadow_kv")
    if shadow and shadow.get("decisions"):
        lines.append(f"- Shadow KV: predicted hit/miss right for {pct(shadow['accuracy'])} of "
                     f"{shadow['decisions']} decisions ({shadow['expected_hits']} hits expected,"
                     f" {shadow['actual_hits']} found)")
    return section


def decision_line(n: int, row: Any) -> list[str]:
    prefix = f", prefix {row.prefix_hash[:6]}" if row.prefix_hash else ""
    head = (f"{n}. t={row.time_s:.2f}s | {row.request} (tenant {row.tenant or '-'}, "
            f"{int(row.input_tokens)} tokens{prefix}) -> {row.instance}: {row.reason}")
    seen = {part.split(":", 1)[0]: part.split(":", 1)[1] for part in str(row.seen).split(";")
            if ":" in part}
    context = seen.get(row.instance, "")
    if context:
        fields = dict(kv.split("=") for kv in context.split(","))
        context = (f"queue {fields['queue_depth']}, batch {fields['batch_size']}, kv "
                   f"{float(fields['kv_utilization']):.0%}")
    cache = "hit" if row.cache_hit == "True" else "miss" if row.cache_hit == "False" else "-"
    lines = [head, f"   Context: {row.instance} {context or 'state not read by the policy'}; "
             f"est. TTFT there {ms(row.est_ttft_ms)}",
             f"   Result: TTFT {ms(row.actual_ttft_ms)}, cache {cache} (expected "
             f"{'hit' if row.expected_cache_hit == 'True' else 'miss'})"]
    if row.ttft_regret_ms > 0:
        lines.append(f"   Regret: {row.best_alternative} est. TTFT "
                     f"{ms(row.best_alternative_ttft_ms)} ({row.ttft_regret_ms:.1f} ms better)")
    return lines


def worst_decisions(inputs: TraceInputs, count: int, rank: int) -> Section:
    section = Section(f"Worst Decisions ({count} examples)", rank)
    r = inputs.routing
    if r is None:
        return no_trace(section)
    ordered = r.assign(regret=r.ttft_regret_ms.fillna(0),
                       ttft=r.actual_ttft_ms.fillna(-1)).sort_values(
        ["regret", "ttft", "time_s", "request"], ascending=[False, False, True, True])
    for n, row in enumerate(ordered.head(count).itertuples(), 1):
        section.lines.extend(decision_line(n, row))
    return section


def audit(inputs: TraceInputs) -> list[Section]:
    stats = Section("Decision Audit", 1)
    sample = Section("Sampled Decisions", 3)
    r = inputs.routing
    if r is None:
        return [no_trace(stats)]
    if not len(r):
        stats.lines.append("- no routing decisions")
        return [stats]
    d = inputs.decisions
    assert d is not None
    best = (r.instance == r.best_alternative).mean()
    done = r.actual_ttft_ms.notna()
    error = (r.actual_ttft_ms[done] - r.est_ttft_ms[done]).abs()
    stats.lines += [
        f"- {len(d[d.stage == 'admission'])} admission decisions "
        f"({int((d.outcome == 'reject').sum())} rejections, "
        f"{int((d.outcome == 'delay').sum())} delays), {len(r)} routing decisions",
        f"- {pct(best)} of routing decisions chose the instance with the lowest estimated TTFT",
        f"- TTFT estimate vs actual: mean abs difference {ms(error.mean())}" if len(error)
        else "- no request reached its first token",
        "- routed per instance: " + ", ".join(
            f"{i} {n}" for i, n in r.instance.value_counts().sort_index().items()),
    ]
    step = max(1, len(r) // 5)
    for n, row in enumerate(r.iloc[::step].head(5).itertuples(), 1):
        sample.lines.extend(decision_line(n, row))
    return [stats, sample]


# ---------------------------------------------------------------- patterns


def patterns(inputs: TraceInputs) -> Section:
    """Request features over-represented among poor outcomes (an SLO miss; without targets, a
    TTFT above the run's p90 or not completing)."""
    section = Section("Patterns in Poor Outcomes", 1)
    req = inputs.requests.frame()
    a = inputs.anomalies
    if a is not None and (a.type == "slo_violation").any():
        poor = req.id.isin(set(a.requests[a.type == "slo_violation"]))
        what = "missed an SLO target"
    else:
        cut = float(req.ttft_ms.quantile(0.9))
        poor = (req.ttft_ms > cut) | (req.final_state != "completed")
        what = f"TTFT above the p90 ({ms(cut)}) or did not complete"
    poor = poor | req.final_state.isin(["rejected", "timed_out"])
    if not poor.any():
        section.lines.append("- no poor outcomes")
        return section
    quartile = req.input_tokens.quantile(0.75)
    req["prompt"] = (req.input_tokens > quartile).map({True: f"> {quartile:.0f} tokens",
                                                       False: f"<= {quartile:.0f} tokens"})
    req["cache"] = (req.cached_tokens > 0).map({True: "hit", False: "miss"})
    req["preempted"] = (req.preemptions > 0).map({True: "yes", False: "no"})
    found = []
    for feature in ("tenant", "slo_class", "instance", "prompt", "cache", "preempted"):
        overall = req[feature].value_counts(normalize=True).to_dict()
        among = req[poor][feature].value_counts()
        for value, n in among.items():
            support = n / poor.sum()
            lift = support / overall[value]
            if support >= 0.1 and lift >= 1.2 and req[feature].nunique() > 1:
                found.append((lift, support, feature, value, n))
    section.lines.append(f"- {int(poor.sum())} of {len(req)} requests {what}")
    for lift, support, feature, value, n in sorted(found, key=lambda f: (-f[0] * f[1], f[2],
                                                                         str(f[3])))[:6]:
        section.lines.append(f"- {feature}={value or '(none)'}: {pct(support)} of poor outcomes "
                             f"({n}) vs {pct(support / lift)} of all requests (lift {lift:.1f})")
    if not found:
        section.lines.append("- no feature stands out (poor outcomes spread evenly)")
    return section


# ---------------------------------------------------------------- strategies


def issue_focused(inputs: TraceInputs, issues: list[Issue]) -> list[Section]:
    return [outcome(inputs), issues_section(issues), counterfactual_section(inputs, False),
            worst_decisions(inputs, 3, 4), focus_section(issues)]


def decision_audit(inputs: TraceInputs, issues: list[Issue]) -> list[Section]:
    return [outcome(inputs), *audit(inputs), focus_section(issues)]


def counterfactual(inputs: TraceInputs, issues: list[Issue]) -> list[Section]:
    return [outcome(inputs), counterfactual_section(inputs, True),
            worst_decisions(inputs, 5, 3), focus_section(issues)]


def pattern_mining(inputs: TraceInputs, issues: list[Issue]) -> list[Section]:
    return [outcome(inputs), patterns(inputs), issues_section(issues, 3), focus_section(issues)]


BUILDERS: dict[str, Callable[[TraceInputs, list[Issue]], list[Section]]] = {
    "issue_focused": issue_focused, "decision_audit": decision_audit,
    "counterfactual": counterfactual, "pattern_mining": pattern_mining}


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
