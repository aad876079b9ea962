"""Validation against real serving runs: one native scenario per measured stage (validate/
sets.py), run, reduced the way the client reduced its measurements, and compared
(`blis-simpy validate-real`).

The load is modelled as it ran: Poisson arrivals at the stage's rate, every request at once
(`burst`, a benchmark's request rate inf) or a fixed number in flight (`concurrency`, closed
loop without think time); the measured lengths; a cycled set of prompts as prefix groups (each
distinct prompt a group of its length minus one token, every request a group's prompt plus one
fresh token: vLLM recomputes at least the last token of a fully cached prompt); the engine's
limits and KV size where the set gives them (else what fits in memory); the client's timeout
where it gave up on requests.

Each stage is compared like for like: mean with mean, median with median, per-request TPOT
with per-request TPOT, per-token ITL gaps with the simulated gaps. A stage past the server's
sustainable rate (sets.py: `Stage.saturated`) is compared on throughput and the share
completed, never on latency means that only say how long the client waited.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from blis_simpy.config.kv_tiers import block_bytes
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.yamlio import load_yaml
from blis_simpy.engine.latency import latency_model
from blis_simpy.sim.result import Result
from blis_simpy.sim.run import run
from blis_simpy.validate.sets import Stage

HEADLINE = ("e2e", "tpot", "ttft", "throughput")
NAMES = {"e2e": "E2E", "tpot": "TPOT/ITL", "ttft": "TTFT", "throughput": "throughput",
         "completed": "completed"}
REFERENCES = ("blis-roofline", "blis-trained-physics")
# A stage the real server kept up with is "overloaded" in the simulator when the simulated
# server is still draining long after the last arrival: later than twice the measured E2E plus
# this fraction of the arrival window.
BACKLOG = 0.05
BURST_WINDOW_S = 0.001  # every request of a burst arrives within this much time
FIT_REQUESTS = 600  # requests of each stage simulated while fitting (the report runs all)


@dataclass(frozen=True, slots=True)
class Latency:
    """The step model under test: the physical model with each stage's server family's
    coefficients (`section` None: the bundled sets, or `families`' files), or a fixed
    `latency:` section."""
    section: Mapping[str, Any] | None
    label: str
    families: Mapping[str, Path] = field(default_factory=dict)

    @classmethod
    def files(cls, families: Mapping[str, Path]) -> Latency:
        """Each family's coefficients from its own file (a fit's)."""
        return cls(None, "physical model, fitted coefficients", dict(families))

    @classmethod
    def default(cls) -> Latency:
        return cls(None, "physical model, each server family's bundled coefficients")

    @classmethod
    def roofline(cls) -> Latency:
        return cls({"type": "roofline"}, "native roofline")

    @classmethod
    def coefficients(cls, path: Path) -> Latency:
        """A coefficients file written by `blis-simpy calibrate`."""
        return cls({"type": "physical", "coefficients": str(path)}, f"coefficients {path.name}")

    @classmethod
    def from_file(cls, path: Path) -> Latency:
        """A calibrated coefficients file (JSON), or a YAML file whose `latency:` section a
        scenario can use as is."""
        if path.suffix == ".json":
            return cls.coefficients(path)
        data = load_yaml(read_text(path, "--coefficients", "a coefficients JSON file or a "
                                   "YAML file with a `latency:` section"), str(path))
        section = data.get("latency") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            raise ScenarioError(f"--coefficients {path}", "needs a `latency:` mapping (or a "
                                "coefficients .json written by blis-simpy calibrate)")
        return cls(dict(section), f"catalog {path.name}")

    def for_stage(self, stage: Stage) -> dict[str, Any]:
        if self.section is None:
            chosen = self.families.get(stage.server)
            section: dict[str, Any] = {
                "type": "physical",
                "coefficients": str(chosen) if chosen is not None else stage.server}
        else:
            section = dict(self.section)
        limit = stage.engine.get("graph_max_batch")  # the server's own setting, where known
        if limit is not None and section.get("type", "physical") == "physical":
            section["graph_max_batch"] = int(limit)
        return section


def in_sample(stages: Sequence[Stage], latency: Latency) -> list[str]:
    """The keys of the stages the coefficients under test were fitted on (the `fit.stages`
    of their file: a bundled family's or a calibrated one)."""
    from blis_simpy.config.catalog import data_dir
    from blis_simpy.config.step_models import STEP_DIR

    fitted: dict[str, set[str]] = {}
    out = []
    for stage in stages:
        section = latency.for_stage(stage)
        name = section.get("coefficients") if section.get("type") == "physical" else None
        if not isinstance(name, str):
            continue
        if name not in fitted:
            path = Path(name) if name.endswith(".json") else \
                data_dir() / STEP_DIR / f"{name}.json"
            try:
                data = json.loads(path.read_text(encoding="utf-8"))  # type: ignore[union-attr]
                stages_fitted = data["fit"]["stages"]
            except (OSError, ValueError, KeyError, TypeError):
                stages_fitted = []
            fitted[name] = {k for k in stages_fitted if isinstance(k, str)}
        if stage.key in fitted[name]:
            out.append(stage.key)
    return out


def length_config(dist: Mapping[str, Any]) -> dict[str, Any]:
    """A measured length distribution as a scenario's: measured files list observed token
    counts as `{type: empirical, values: [...]}`, a scenario resamples them as `samples`."""
    if dist.get("type") == "empirical" and "values" in dist:
        return {"type": "empirical", "samples": [float(v) for v in dist["values"]]}
    return dict(dist)


def stage_scenario(stage: Stage, latency: Latency, seed: int = 42,
                   max_requests: int | None = None) -> Scenario:
    """The native scenario of one measured stage (see the module docstring)."""
    load = stage.load
    if max_requests is not None and stage.distinct_prompts:
        max_requests = max(max_requests, 10 * stage.distinct_prompts)  # the first uses: <10 %
    requests = min(load.requests, max_requests or load.requests)
    tenant: dict[str, Any] = {"id": "client", "prompt": length_config(stage.prompt),
                              "output": length_config(stage.output)}
    workload: dict[str, Any] = {"type": "tenants", "max_requests": requests}
    if load.arrival == "poisson":
        assert load.rate is not None
        tenant["arrival"] = {"type": "poisson"}
        workload.update(rate_per_s=load.rate, duration_s=requests / load.rate * 1.5)
    elif load.arrival == "burst":
        tenant["arrival"] = {"type": "constant"}
        workload.update(rate_per_s=requests / BURST_WINDOW_S, duration_s=1.0)
    else:
        tenant["closed_loop"] = {"users": load.concurrency,
                                 "think_time_s": {"type": "constant", "value": 0.0}}
        workload.update(duration_s=3_600.0 * 24)
    if stage.measured.timeout_s is not None:  # the client gave up on requests: so does ours
        workload["timeout_s"] = stage.measured.timeout_s
    if stage.distinct_prompts:
        prompt = round(stage.mean_prompt)
        tenant.update(prompt={"type": "constant", "value": 1.0},
                      prefix={"groups": [], "reuse_probability": 1.0})
        workload["prefix_groups"] = [
            {"id": f"prompt-{i}", "length": {"type": "constant", "value": float(prompt - 1)}}
            for i in range(stage.distinct_prompts)]
    workload["tenants"] = [tenant]
    engine: dict[str, Any] = {}
    limits = stage.engine
    for ours, theirs in (("max_running_requests", "max_num_seqs"),
                         ("max_scheduled_tokens", "max_num_batched_tokens"),
                         ("max_model_len", "max_model_len"), ("kv_blocks", "kv_blocks")):
        if limits.get(theirs) is not None:
            engine[ours] = int(limits[theirs])
    cpu_gib = limits.get("cpu_offload_gib")
    if cpu_gib:
        engine["kv_tiers"] = {"cpu_blocks": cpu_tier_blocks(stage, float(cpu_gib))}
    data = {"version": 1, "name": stage.name.replace("/", "-"), "seed": seed,
            "model": {"name": stage.model, "gpu": stage.gpu, "tp": stage.tp},
            "latency": latency.for_stage(stage), "engine": engine, "workload": workload}
    try:
        return Scenario.from_dict(data)
    except ScenarioError as exc:
        raise ScenarioError(stage.key, str(exc)) from None


def cpu_tier_blocks(stage: Stage, gib: float, block_size: int = 16) -> int:
    """KV blocks a CPU offload buffer of `gib` GiB holds: vLLM's offloading size is the whole
    TP group's, so a block counts every rank's share (the model's full KV bytes per block)."""
    from blis_simpy.config.catalog import bundled_model_config

    size = block_bytes(bundled_model_config(stage.model), 1, block_size)
    if size is None:
        raise ScenarioError(stage.key, f"cannot size a KV block of {stage.model!r} in bytes")
    return int(gib * 2**30) // size


# ---- the simulated side, reduced like the measured one ---------------------------------------

def reduce(stage: Stage, result: Result) -> dict[str, float]:
    """The simulated stage's statistics under the measured side's names: `<metric>:<stat>`
    (ms), requests_per_s, output_tokens_per_s, completed (%), window_s, drain_s."""
    table = result.requests
    done = measured_requests(stage, table)
    if done.empty:
        raise ScenarioError(stage.key, "no request completed in the simulation")
    ttft = done["ttft_ms"].to_numpy(dtype=float)
    e2e = done["e2e_ms"].to_numpy(dtype=float)
    out = done["output_tokens"].to_numpy(dtype=float)
    many = out > 1
    tpot = (e2e[many] - ttft[many]) / (out[many] - 1)
    stats: dict[str, float] = {}
    for metric, values in (("ttft", ttft), ("e2e", e2e), ("tpot", tpot)):
        if len(values):
            stats[f"{metric}:mean"] = float(values.mean())
            stats[f"{metric}:median"] = float(np.median(values))
            stats[f"{metric}:p90"] = float(np.percentile(values, 90))
            stats[f"{metric}:p99"] = float(np.percentile(values, 99))
    summary = result.summary
    for statistic, key in (("mean", "itl_mean_ms"), ("median", "itl_p50_ms"),
                           ("p90", "itl_p90_ms"), ("p99", "itl_p99_ms")):
        stats[f"itl:{statistic}"] = float(summary[key])
    arrivals = table["arrival_s"].to_numpy(dtype=float)
    last = float(done["completion_s"].max())
    span = last - float(arrivals.min())
    stats["requests_per_s"] = len(done) / span if span > 0 else float("nan")
    stats["output_tokens_per_s"] = float(out.sum()) / span if span > 0 else float("nan")
    stats["completed"] = 100.0 * len(done) / len(table)
    stats["window_s"] = float(arrivals.max() - arrivals.min())
    stats["drain_s"] = last - float(arrivals.max())
    return stats


def measured_requests(stage: Stage, table: Any) -> Any:
    """The completed requests the statistics cover. A shortened run of a stage that cycles a
    set of prompts leaves out the first use of each (`cached_tokens` 0): in the full stage
    they are a few percent of the requests, in a shortened one a third."""
    done = table[table["final_state"] == "completed"]
    if stage.distinct_prompts and len(table) < stage.load.requests:
        warm = done[done["cached_tokens"] > 0]
        if not warm.empty:
            return warm
    return done


# ---- one stage's comparison ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Compared:
    """One headline metric of a stage: which statistic, measured, simulated."""
    statistic: str
    measured: float
    simulated: float

    @property
    def error(self) -> float:
        return signed_error(self.simulated, self.measured)


@dataclass(frozen=True, slots=True)
class Row:
    stage: Stage
    simulated: dict[str, float]
    published: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def saturated(self) -> bool:
        return self.stage.saturated

    def compared(self, metric: str) -> Compared | None:
        """The headline comparison of `metric` (e2e, tpot, ttft, throughput, completed), or
        None when the stage measured nothing to compare it with."""
        return headline(self.stage, self.simulated, metric)

    def error(self, metric: str) -> float | None:
        found = self.compared(metric)
        return None if found is None else found.error

    @property
    def overloaded(self) -> bool:
        """The simulated server fell behind a load the real server kept up with."""
        if self.saturated or self.stage.load.arrival != "poisson":
            return False
        e2e = self.stage.measured.stat("e2e", "mean") or self.stage.measured.stat("e2e",
                                                                                   "median")
        return e2e is not None and self.simulated["drain_s"] > \
            2 * e2e / 1e3 + BACKLOG * self.simulated["window_s"]


def headline(stage: Stage, sim: Mapping[str, float], metric: str) -> Compared | None:
    m = stage.measured
    if metric == "throughput":
        if m.requests_per_s is None:
            return None
        return Compared("requests/s", m.requests_per_s, sim["requests_per_s"])
    if metric == "completed":
        pct = m.completed_pct
        return None if pct is None or not stage.censored else Compared("%", pct,
                                                                      sim["completed"])
    if metric == "tpot":
        return tpot_headline(stage, sim)
    for statistic in ("mean", "median"):
        value = m.stat(metric, statistic)
        if value is not None:
            return Compared(statistic, value, sim[f"{metric}:{statistic}"])
    return None


def tpot_headline(stage: Stage, sim: Mapping[str, float]) -> Compared | None:
    """Per-request TPOT where measured; else (mean E2E - mean TTFT) / (output - 1) on both
    sides when every output has one length (inference-perf's own ITL is not the interval
    between tokens); else the per-token ITL gaps."""
    m = stage.measured
    for metric, statistic in (("tpot", "mean"), ("tpot", "median")):
        value = m.stat(metric, statistic)
        if value is not None:
            return Compared(f"{metric} {statistic}", value, sim[f"{metric}:{statistic}"])
    e2e, ttft = m.stat("e2e", "mean"), m.stat("ttft", "mean")
    if e2e is not None and ttft is not None and stage.output.get("type") == "constant":
        steps = max(stage.mean_output - 1, 1)
        return Compared("(E2E-TTFT)/(out-1)", (e2e - ttft) / steps,
                        (sim["e2e:mean"] - sim["ttft:mean"]) / steps)
    for statistic in ("mean", "median"):
        value = m.stat("itl", statistic)
        if value is not None:
            return Compared(f"itl {statistic}", value, sim[f"itl:{statistic}"])
    return None


def checked(stage: Stage, scenario: Scenario) -> Scenario:
    """The scenario, its step model built once so that a model or GPU it cannot cost fails
    before any stage runs."""
    try:
        latency_model(resolve(scenario))
    except ScenarioError as exc:
        raise ScenarioError(stage.key, str(exc)) from None
    return scenario


def signed_error(simulated: float, measured: float) -> float:
    return 100.0 * (simulated - measured) / measured


def simulate(stage: Stage, latency: Latency, seed: int = 42,
             max_requests: int | None = None) -> dict[str, float]:
    return reduce(stage, run(stage_scenario(stage, latency, seed, max_requests)))


def published(stage: Stage) -> dict[str, dict[str, float]]:
    """The reference's published errors for the same stage (training set only)."""
    text = resources.files("blis_simpy.data").joinpath("real_vllm_h100.json").read_text()
    experiment, _, index = stage.name.rpartition("/")
    for entry in json.loads(text)["published_errors"]["stages"]:
        if entry["experiment"].split("-", 2)[-1] == experiment and str(entry["stage"]) == index:
            return {ref: entry[ref] for ref in REFERENCES if ref in entry}
    return {}


def validate(stages: Sequence[Stage], latency: Latency, seed: int = 42,
             max_requests: int | None = None, only: str | None = None,
             progress: Callable[[Stage], None] | None = None) -> list[Row]:
    """Simulate every stage (whose set:name contains `only`, if given); every scenario is
    built and checked before any runs."""
    chosen = [s for s in stages if not only or only in s.key]
    if not chosen:
        raise ScenarioError("--only", f"{only!r} matches no stage")
    scenarios = [checked(s, stage_scenario(s, latency, seed, max_requests)) for s in chosen]
    rows = []
    for stage, scenario in zip(chosen, scenarios, strict=True):
        if progress:
            progress(stage)
        rows.append(Row(stage, reduce(stage, run(scenario)),
                        published(stage) if stage.set == "inference-sim-training" else {}))
    return rows


# ---- the report ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Summary:
    """Median and mean |error| (%) of one metric over a set of rows."""
    metric: str
    count: int
    median_abs: float
    mean_abs: float
    median_signed: float


def summarise(rows: Iterable[Row], metric: str) -> Summary:
    errors = [e for e in (row.error(metric) for row in rows) if e is not None]
    if not errors:
        return Summary(metric, 0, float("nan"), float("nan"), float("nan"))
    absolute = [abs(e) for e in errors]
    return Summary(metric, len(errors), statistics.median(absolute),
                   statistics.fmean(absolute), statistics.median(errors))


def scored(rows: Iterable[Row], metric: str) -> list[Row]:
    """The rows a metric's median counts: latencies below saturation, throughput past it
    (where the client waited for every request: one that gave up on some measured the
    requests that finished in time, compared on their share instead)."""
    if metric == "throughput":
        return [r for r in rows if r.saturated and not r.stage.censored]
    return [r for r in rows if not r.saturated]


def _cell(c: Compared | None) -> str:
    if c is None:
        return ""
    return f"{c.measured:.4g} / {c.simulated:.4g} ({c.error:+.1f}%)"


def table(rows: Sequence[Row]) -> str:
    """Every stage on one line: measured / simulated (signed error) per headline metric."""
    width = max(len(r.stage.key) for r in rows)
    cols = ("e2e", "tpot", "ttft", "throughput")
    lines = [f"  {'set:stage':<{width}}  " + "  ".join(f"{NAMES[c]:<28}" for c in cols)]
    for row in rows:
        flags = []
        if row.stage.censored:
            flags.append(f"censored: completed {_cell(row.compared('completed'))}")
        elif row.saturated:
            flags.append("past saturation")
        if row.overloaded:
            flags.append("overloaded in simulation")
        lines.append(f"  {row.stage.key:<{width}}  " + "  ".join(
            f"{_cell(row.compared(c)):<28}" for c in cols) + ("  " + "; ".join(flags)
                                                              if flags else ""))
    return "\n".join(lines)


def medians(rows: Sequence[Row]) -> dict[str, Summary]:
    """Median |error| of each headline metric over the rows it counts on."""
    return {metric: summarise(scored(rows, metric), metric) for metric in HEADLINE}


def summary_lines(rows: Sequence[Row], title: str) -> list[str]:
    by_set: dict[str, list[Row]] = {}
    for row in rows:
        by_set.setdefault(row.stage.set, []).append(row)
    groups = [*by_set.items(), ("all sets", list(rows))]
    width = max(len(name) for name, _ in groups)
    lines = [title, f"  {'set':<{width}}  {'E2E':>8}  {'TPOT/ITL':>8}  {'TTFT':>8}  "
             f"{'thru-put':>8}   (median |error|: latencies below saturation, throughput past "
             "it; stage counts)"]
    for name, group in groups:
        s = medians(group)
        cells = "  ".join(f"{s[m].median_abs:7.1f}%" if s[m].count else f"{'-':>8}"
                          for m in HEADLINE)
        counts = "/".join(str(s[m].count) for m in HEADLINE)
        lines.append(f"  {name:<{width}}  {cells}   ({counts})")
    overloaded = [r.stage.key for r in rows if r.overloaded]
    lines.append(f"  stages the real server kept up with but the simulated one did not: "
                 f"{len(overloaded)}" + (f" ({', '.join(overloaded)})" if overloaded else ""))
    return lines


def report(rows: Sequence[Row], latency: Latency) -> str:
    lines = [f"blis-simpy ({latency.label}) against real serving measurements: {len(rows)} "
             "stages", "", table(rows), ""]
    lines += summary_lines(rows, "median |error| by set:")
    return "\n".join(lines) + "\n"
