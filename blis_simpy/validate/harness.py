"""Validation against real vLLM measurements: one native scenario per measured stage, run, and
compared with what the client measured (`blis-simpy validate-real DIR`).

The load is modelled as it ran, not as it was asked: the inference-perf build behind the public
runs cycled a fixed set of prompts (num_groups x num_prompts_per_group = 100, see each run's
`results/config.yaml`), so after the first round every prompt is a whole-prompt prefix-cache
hit. Each distinct prompt is a prefix group of the measured prompt length minus one token, and
every request is a group's prompt plus one fresh token (vLLM recomputes at least the last
token of a fully cached prompt). Arrivals are Poisson (inference-perf's `constant` load draws
exponential gaps scaled to the stage's duration), exactly rate x duration requests per stage,
each stage drained on its own. Outputs ran with ignore_eos: every request generates the
measured median output length.

Stages in which the client gave up on requests (its timeout, seen in the failures' latencies)
are run with that client timeout: the simulated means then cover, as the measured ones do, only
the requests that finished in time, and the share that did is compared too. They stay out of the
medians (the load the server saw depends on when the client gave up).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.kv_tiers import block_bytes
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.run import run
from blis_simpy.validate.ground_truth import Experiment, Stage
from blis_simpy.workload.inference_perf import inference_perf

GPU = "H100"
METRICS = ("e2e", "itl", "ttft")
METRIC_NAMES = {"e2e": "mean E2E (ms)", "itl": "mean ITL (ms)", "ttft": "mean TTFT (ms)",
                "rps": "throughput (requests/s)",
                "completed": "completed before the client's timeout (%)"}
REFERENCES = ("blis-roofline", "blis-trained-physics")
# A stage the real server kept up with is "overloaded" in the simulator when the simulated
# server is still draining long after the last arrival: later than twice the measured mean
# E2E plus this fraction of the arrival window (a server that keeps up drains in about one
# E2E; one that falls behind accumulates a backlog in proportion to the window).
BACKLOG = 0.05


def facts() -> dict[str, Any]:
    """The bundled facts about the public runs: GPU KV blocks per model and the reference's
    published errors per stage (sources named in the file)."""
    text = resources.files("blis_simpy.data").joinpath("real_vllm_h100.json").read_text()
    return json.loads(text)


def kv_blocks(model: str, where: str) -> int:
    blocks = facts()["kv_blocks"]["models"]
    if model.lower() not in blocks:
        raise ScenarioError(where, f"no GPU KV block count is known for {model!r}",
                            ", ".join(sorted(blocks)))
    return int(blocks[model.lower()])


@dataclass(frozen=True, slots=True)
class Latency:
    """The step-time model the scenarios use: the native roofline, or a named catalog entry
    (a `latency:` section written by `blis-simpy calibrate`)."""
    section: dict[str, Any]
    label: str

    @classmethod
    def roofline(cls) -> Latency:
        return cls({"type": "roofline"}, "roofline")

    @classmethod
    def from_file(cls, path: Path) -> Latency:
        """A catalog entry: a YAML file whose `latency:` section a scenario can use as is."""
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScenarioError(f"--catalog {path}", f"cannot read: {exc.strerror or exc}") \
                from None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ScenarioError(f"--catalog {path}", "is not valid YAML: "
                                f"{str(exc).splitlines()[0]}") from None
        section = data.get("latency") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            raise ScenarioError(f"--catalog {path}", "needs a `latency:` mapping (as written "
                                "by blis-simpy calibrate)")
        return cls(dict(section), f"catalog {path.name}")


def cpu_tier_blocks(model: str, gib: float, block_size: int = 16) -> int:
    """KV blocks a CPU offload buffer of `gib` GiB holds for this model: vLLM's offloading size
    is the whole TP group's, so a block counts every rank's share (the model's full KV bytes
    per block; bundled config)."""
    size = block_bytes(bundled_model_config(model), 1, block_size)
    if size is None:
        raise ScenarioError("--kv-cpu-gib", f"cannot size a KV block of {model!r} in bytes")
    return int(gib * 2**30) // size


def stage_scenario(exp: Experiment, stage: Stage, latency: Latency, seed: int = 42,
                   max_duration_s: float | None = None, cpu_gib: float = 0.0) -> Scenario:
    """The native scenario of one measured stage (see the module docstring for the load);
    `cpu_gib` > 0 adds a CPU KV tier of that size (the runs' OffloadingConnector buffer)."""
    converted = inference_perf(exp.folder / "results" / "config.yaml",
                               f"{exp.name}/results/config.yaml")
    workload = dict(converted.workload)
    duration = min(stage.duration_s, max_duration_s or stage.duration_s)
    workload.pop("load_profile", None)
    workload.update(rate_per_s=stage.rate, duration_s=duration,
                    max_requests=max(1, round(stage.rate * duration)))
    if stage.measured.timeout_s is not None:  # the client gave up on requests: so does ours
        workload["timeout_s"] = stage.measured.timeout_s
    tenant = dict(workload["tenants"][0])
    tenant.update(arrival={"type": "poisson"},
                  prompt={"type": "constant", "value": 1.0},
                  output={"type": "constant", "value": float(stage.output_len)},
                  prefix={"groups": [], "reuse_probability": 1.0})
    workload["tenants"] = [tenant]
    workload["prefix_groups"] = [
        {"id": f"prompt-{i}", "length": {"type": "constant", "value": float(stage.prompt_len - 1)}}
        for i in range(exp.prompts)]
    data = {
        "version": 1, "name": f"{exp.name}-stage{stage.index}", "seed": seed,
        "model": {"name": exp.model, "gpu": GPU, "tp": exp.tp},
        "latency": latency.section,
        "engine": {"max_running_requests": exp.max_num_seqs,
                   "max_scheduled_tokens": exp.max_num_batched_tokens,
                   "max_model_len": exp.max_model_len,
                   "kv_blocks": kv_blocks(exp.model, f"{exp.name}/exp-config.yaml: model")},
        "workload": workload,
    }
    if cpu_gib > 0:
        engine = dict(data["engine"])  # type: ignore[call-overload]
        engine["kv_tiers"] = {"cpu_blocks": cpu_tier_blocks(exp.model, cpu_gib)}
        data["engine"] = engine
    return Scenario.from_dict(data)


@dataclass(frozen=True, slots=True)
class Row:
    """One stage: measured and simulated figures, and the reference's published errors."""
    stage: Stage
    simulated: dict[str, float]  # e2e, itl, ttft (ms), rps, window_s and drain_s (s)
    published: dict[str, dict[str, float]]  # reference -> metric -> signed error (%)

    def measured(self, metric: str) -> float:
        m = self.stage.measured
        return {"e2e": m.e2e_ms, "itl": m.itl_ms, "ttft": m.ttft_ms,
                "rps": m.requests_per_s, "completed": m.completed_pct}[metric]

    def error(self, metric: str) -> float:
        """Signed relative error of the simulation, in percent of the measurement."""
        return signed_error(self.simulated[metric], self.measured(metric))

    @property
    def overloaded(self) -> bool:
        """The simulated server fell behind a load the real server kept up with."""
        return not self.stage.censored and fell_behind(self.stage, self.simulated["window_s"],
                                                       self.simulated["drain_s"])


def fell_behind(stage: Stage, window_s: float, drain_s: float) -> bool:
    """Whether a simulated stage whose arrivals spanned `window_s` and whose last request
    finished `drain_s` after the last arrival fell behind its load (see BACKLOG)."""
    return drain_s > 2 * stage.measured.e2e_ms / 1e3 + BACKLOG * window_s


def signed_error(simulated: float, measured: float) -> float:
    return 100.0 * (simulated - measured) / measured


def simulate_stage(exp: Experiment, stage: Stage, latency: Latency, seed: int = 42,
                   max_duration_s: float | None = None) -> dict[str, float]:
    """Run one stage and reduce it the way the client's figures are reduced."""
    return simulate(stage, stage_scenario(exp, stage, latency, seed, max_duration_s))


def simulate(stage: Stage, scenario: Scenario) -> dict[str, float]:
    result = run(scenario)
    done = result.requests[result.requests["final_state"] == "completed"]
    if done.empty:
        raise ScenarioError(stage.name, "no request completed in the simulation")
    e2e, ttft = float(done["e2e_ms"].mean()), float(done["ttft_ms"].mean())
    arrivals = result.requests["arrival_s"]
    span = float(done["completion_s"].max() - arrivals.min())
    return {"e2e": e2e, "ttft": ttft, "itl": (e2e - ttft) / max(stage.output_len - 1, 1),
            "rps": len(done) / span if span > 0 else float("nan"),
            "completed": 100.0 * len(done) / len(result.requests),
            "window_s": float(arrivals.max() - arrivals.min()),
            "drain_s": float(done["completion_s"].max() - arrivals.max())}


def published(stage: Stage) -> dict[str, dict[str, float]]:
    for entry in facts()["published_errors"]["stages"]:
        if entry["experiment"] == stage.experiment and entry["stage"] == stage.index:
            return {ref: entry[ref] for ref in REFERENCES if ref in entry}
    return {}


def validate(experiments: Sequence[Experiment], latency: Latency, seed: int = 42,
             max_duration_s: float | None = None, only: str | None = None,
             progress: Callable[[Stage], None] | None = None, cpu_gib: float = 0.0
             ) -> list[Row]:
    """Simulate every stage (whose name contains `only`, if given)."""
    chosen = [(stage, stage_scenario(exp, stage, latency, seed, max_duration_s, cpu_gib))
              for exp in experiments for stage in exp.stages
              if not only or only in stage.name]  # every scenario checked before any runs
    if not chosen:
        raise ScenarioError("--only", f"{only!r} matches no stage")
    rows = []
    for stage, scenario in chosen:
        if progress:
            progress(stage)
        rows.append(Row(stage, simulate(stage, scenario), published(stage)))
    return rows


# ---- the report -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Summary:
    """Median and mean |error| (%) of one metric over a set of stages."""
    metric: str
    stages: int
    median_abs: float
    mean_abs: float
    median_signed: float


def summarise(rows: Iterable[Row], metric: str) -> Summary:
    errors = [row.error(metric) for row in rows]
    if not errors:
        return Summary(metric, 0, float("nan"), float("nan"), float("nan"))
    absolute = [abs(e) for e in errors]
    return Summary(metric, len(errors), statistics.median(absolute),
                   statistics.fmean(absolute), statistics.median(errors))


def summarise_published(rows: Iterable[Row], reference: str, metric: str) -> Summary:
    errors = [row.published[reference][metric] for row in rows
              if metric in row.published.get(reference, {})]
    if not errors:
        return Summary(metric, 0, float("nan"), float("nan"), float("nan"))
    absolute = [abs(e) for e in errors]
    return Summary(metric, len(errors), statistics.median(absolute),
                   statistics.fmean(absolute), statistics.median(errors))


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"


def report(rows: Sequence[Row], latency: Latency) -> str:
    """Per-stage tables (one per metric), then the median / mean |error| per metric over the
    stages the real server kept up with; censored stages are listed apart."""
    kept = [r for r in rows if not r.stage.censored]
    censored = [r for r in rows if r.stage.censored]
    width = max(len(r.stage.name) for r in rows)
    lines = [f"blis-simpy ({latency.label}) against real vLLM measurements: "
             f"{len(kept)} stages, {len(censored)} censored (client timeouts) listed apart", ""]
    for metric in (*METRICS, "rps"):
        lines.append(METRIC_NAMES[metric])
        header = f"  {'stage':<{width}}  {'measured':>10}  {'simulated':>10}  {'error':>8}"
        if metric in METRICS:
            header += f"  {'ref roofline':>12}  {'ref trained':>11}"
        lines.append(header)
        for row in kept + censored:
            line = (f"  {row.stage.name:<{width}}  {row.measured(metric):>10.2f}  "
                    f"{row.simulated[metric]:>10.2f}  {_pct(row.error(metric)):>8}")
            if metric in METRICS:
                refs = [row.published.get(ref, {}).get(metric) for ref in REFERENCES]
                line += f"  {_pct(refs[0]):>12}  {_pct(refs[1]):>11}"
            flags = (["censored"] if row.stage.censored else []) + (
                ["overloaded in simulation"] if row.overloaded else [])
            lines.append(line + ("  " + ", ".join(flags) if flags else ""))
        lines.append("")
    lines.append(f"|error| over the {len(kept)} uncensored stages "
                 "(median / mean; signed median):" if kept else
                 "no uncensored stage was chosen: no median |error|")
    for metric in (*METRICS, "rps") if kept else ():
        s = summarise(kept, metric)
        lines.append(f"  {METRIC_NAMES[metric]:<24} {s.median_abs:6.1f}% / {s.mean_abs:6.1f}%"
                     f"   signed {s.median_signed:+.1f}%")
    for ref in REFERENCES:
        with_ref = [r for r in kept if ref in r.published]
        if not with_ref:
            continue
        parts = []
        for metric in METRICS:
            ours, theirs = summarise(with_ref, metric), summarise_published(with_ref, ref, metric)
            parts.append(f"{metric} {ours.median_abs:.1f}% vs {theirs.median_abs:.1f}%")
        lines.append(f"  on the {len(with_ref)} stages with published {ref} errors, median "
                     f"|error| blis-simpy vs {ref}: " + ", ".join(parts))
    if censored:
        lines.append(f"  the {len(censored)} censored stages, run with the client's timeout: "
                     "completed before it, measured vs simulated: " + ", ".join(
                         f"{r.stage.name} {r.measured('completed'):.0f}% vs "
                         f"{r.simulated['completed']:.0f}%" for r in censored))
    overloaded = [r.stage.name for r in kept if r.overloaded]
    lines.append(f"  stages overloaded in simulation where the real server kept up: "
                 f"{len(overloaded)}" + (f" ({', '.join(overloaded)})" if overloaded else ""))
    return "\n".join(lines) + "\n"

