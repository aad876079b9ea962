"""Measured serving runs as data: one format for every public set (bundled facts in
data/ground_truth/, listed with their sources in docs/accuracy.md) and for a user's own runs
(the importers in validate/importers.py write it).

A set is a JSON object: `set` (its name), `title`, `source` (repository@commit:paths or page,
licence), `known` and `guesses` (what the settings are known to be, and what had to be
assumed), `defaults` (stage fields every stage shares) and `stages`. A stage is one load that
ran on one server:

    name, model, gpu, tp, server: {family, version}
    engine: {max_num_seqs, max_num_batched_tokens, max_model_len, kv_blocks, prefix_caching,
             graph_max_batch}  (the largest step the server runs in captured graphs)
    load: {arrival: poisson, rate, duration_s | requests}
        | {arrival: burst, requests}            every request sent at once
        | {arrival: concurrency, concurrency, requests}    closed loop, no think time
    prompt, output: a scenario length distribution ({type: constant, value: 512}, uniform,
                    empirical)
    distinct_prompts: N    (optional) N prompts cycled: every later use is a cache hit
    measured: {ttft_ms|tpot_ms|itl_ms|e2e_ms: {mean, median, p90, p99}, requests_per_s,
               output_tokens_per_s, completed, failed, timeout_s, duration_s}

Only facts and small figures: no file of a source is copied. Every problem is a ScenarioError
naming the file and the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from blis_simpy.config.catalog import data_dir
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import MAX_REQUESTS

SETS_DIR = "ground_truth"
METRICS = ("ttft", "tpot", "itl", "e2e")
STATISTICS = ("mean", "median", "p90", "p99")
ARRIVALS = ("poisson", "burst", "concurrency")
ENGINE_KEYS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_blocks",
               "prefix_caching", "cpu_offload_gib", "graph_max_batch")
STAGE_KEYS = ("name", "experiment", "model", "gpu", "tp", "server", "engine", "load", "prompt",
              "output", "distinct_prompts", "measured")
# Prompts a stage may cycle: each becomes a prefix group of the stage's scenario.
MAX_DISTINCT = 100_000
MEASURED_KEYS = (*(f"{m}_ms" for m in METRICS), "requests_per_s", "output_tokens_per_s",
                 "completed", "failed", "timeout_s", "duration_s")


@dataclass(frozen=True, slots=True)
class Load:
    arrival: str  # poisson | burst | concurrency
    requests: int  # sent in all
    rate: float | None = None  # poisson: requests per second
    duration_s: float | None = None  # poisson: the arrival window
    concurrency: int | None = None  # concurrency: requests in flight


@dataclass(frozen=True, slots=True)
class Measured:
    """What the client measured; latencies in ms by metric and statistic."""
    stats: Mapping[str, Mapping[str, float]]
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    completed: int | None = None
    failed: int = 0
    timeout_s: float | None = None  # the client gave up on requests after this long
    duration_s: float | None = None

    def stat(self, metric: str, statistic: str) -> float | None:
        return self.stats.get(metric, {}).get(statistic)

    @property
    def completed_pct(self) -> float | None:
        if self.completed is None:
            return None
        return 100.0 * self.completed / max(self.completed + self.failed, 1)


@dataclass(frozen=True, slots=True)
class Stage:
    set: str
    name: str
    model: str
    gpu: str
    tp: int
    server: str  # the server family: vllm, sglang, ...
    server_version: str
    engine: Mapping[str, Any]
    load: Load
    prompt: Mapping[str, Any]  # a scenario length distribution
    output: Mapping[str, Any]
    distinct_prompts: int | None
    measured: Measured

    @property
    def key(self) -> str:
        return f"{self.set}:{self.name}"

    @property
    def censored(self) -> bool:
        """The client gave up on requests: its means cover only those that finished in time."""
        return self.measured.failed > 0

    @property
    def mean_output(self) -> float:
        return mean_of(self.output)

    @property
    def mean_prompt(self) -> float:
        return mean_of(self.prompt)

    @property
    def saturated(self) -> bool:
        """Past the server's sustainable rate: everything sent at once, the client gave up
        on requests, or fewer requests per second served than offered (by over 10 %)."""
        if self.load.arrival == "burst" or self.censored:
            return True
        served, rate = self.measured.requests_per_s, self.load.rate
        return self.load.arrival == "poisson" and served is not None and rate is not None \
            and served < 0.9 * rate


@dataclass(frozen=True, slots=True)
class MeasuredSet:
    name: str
    title: str
    source: Mapping[str, Any]
    known: tuple[str, ...]
    guesses: tuple[str, ...]
    stages: tuple[Stage, ...]


@dataclass(frozen=True, slots=True)
class Hints:
    """What the benchmark files do not say: the model (if the file lacks it), the GPU, the
    tensor parallelism, the server family and version, and engine limits."""
    model: str | None = None
    gpu: str = "H100"
    tp: int = 1
    server: str = "vllm"
    version: str = ""
    engine: Mapping[str, Any] = field(default_factory=dict)


def mean_of(dist: Mapping[str, Any]) -> float:
    """The mean of a constant or uniform length distribution (else its `mean`)."""
    kind = dist.get("type")
    if kind == "constant":
        return float(dist["value"])
    if kind == "uniform":
        return (float(dist["low"]) + float(dist["high"])) / 2
    if kind == "empirical":
        values = dist["values"]
        return sum(values) / len(values)
    return float(dist.get("mean", 0.0))


def summary_stats(values: Sequence[float]) -> dict[str, float]:
    """Mean, median, p90 and p99 (linear interpolation, as numpy's default) of measurements."""
    ordered = sorted(values)

    def pct(p: float) -> float:
        rank = p / 100 * (len(ordered) - 1)
        lo, hi = math.floor(rank), math.ceil(rank)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)
    out = {"mean": sum(ordered) / len(ordered), "median": pct(50), "p90": pct(90),
           "p99": pct(99)}
    return {k: v for k, v in out.items() if v > 0}


def length_distribution(values: Sequence[int]) -> dict[str, Any]:
    """Measured token counts as a length distribution: constant, else the values
    themselves."""
    if len(set(values)) == 1:
        return {"type": "constant", "value": int(values[0])}
    return {"type": "empirical", "values": [int(v) for v in values]}


# ---- reading ---------------------------------------------------------------------------------

def bundled_sets() -> list[MeasuredSet]:
    """Every public set shipped in the package (docs/accuracy.md lists their sources)."""
    folder = data_dir() / SETS_DIR
    files = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))
    return [parse(json.loads((folder / name).read_text(encoding="utf-8")), name)
            for name in files]


def parse(data: Any, where: str) -> MeasuredSet:
    top = _mapping(data, where)
    name = _text(top, "set", where)
    defaults = _mapping(top.get("defaults") or {}, f"{where}: defaults")
    stages = top.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ScenarioError(f"{where}: stages", "needs at least one stage")
    parsed = []
    for i, raw in enumerate(stages):
        merged = {**defaults, **_mapping(raw, f"{where}: stages[{i}]")}
        merged["engine"] = {**(defaults.get("engine") or {}), **(raw.get("engine") or {})}
        parsed.append(stage(name, merged, f"{where}: stages[{i}]"))
    names = [s.name for s in parsed]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ScenarioError(f"{where}: stages", f"two stages are named {duplicate!r}")
    return MeasuredSet(name, str(top.get("title", "")), _mapping(top.get("source") or {}, where),
                       tuple(map(str, top.get("known") or ())),
                       tuple(map(str, top.get("guesses") or ())), tuple(parsed))


def stage(set_name: str, data: Mapping[str, Any], where: str) -> Stage:
    unknown = sorted(set(data) - set(STAGE_KEYS) - {"gpu", "tp", "server"})
    if unknown:
        raise ScenarioError(f"{where}: {unknown[0]}", "unknown stage key", ", ".join(STAGE_KEYS))
    server = _mapping(data.get("server") or {}, f"{where}: server")
    engine = _mapping(data.get("engine") or {}, f"{where}: engine")
    bad = sorted(set(engine) - set(ENGINE_KEYS))
    if bad:
        raise ScenarioError(f"{where}: engine.{bad[0]}", "unknown engine key",
                            ", ".join(ENGINE_KEYS))
    for key in ENGINE_KEYS:
        value = engine.get(key)
        if value is not None and key != "prefix_caching" and not _positive(value):
            raise ScenarioError(f"{where}: engine.{key}", f"expected a positive number, got "
                                f"{value!r}")
    sent = load(_mapping(data.get("load"), f"{where}: load"), f"{where}: load")
    distinct = data.get("distinct_prompts")
    if distinct is not None and not (isinstance(distinct, int) and not isinstance(distinct, bool)
                                     and 0 < distinct <= min(sent.requests, MAX_DISTINCT)):
        raise ScenarioError(f"{where}: distinct_prompts", f"expected a positive integer, at "
                            f"most the stage's {sent.requests} requests and {MAX_DISTINCT:,}, "
                            f"got {distinct!r}")
    return Stage(
        set=set_name, name=_text(data, "name", where), model=_text(data, "model", where),
        gpu=_text(data, "gpu", where), tp=int(_number(data, "tp", where)),
        server=str(server.get("family") or "vllm"), server_version=str(server.get("version", "")),
        engine=dict(engine), load=sent,
        prompt=_length(data.get("prompt"), f"{where}: prompt"),
        output=_length(data.get("output"), f"{where}: output"),
        distinct_prompts=distinct,
        measured=measured(_mapping(data.get("measured"), f"{where}: measured"),
                          f"{where}: measured"))


def load(data: Mapping[str, Any], where: str) -> Load:
    arrival = data.get("arrival")
    if arrival not in ARRIVALS:
        raise ScenarioError(f"{where}.arrival", f"got {arrival!r}", ", ".join(ARRIVALS))
    if arrival == "poisson":
        rate = _number(data, "rate", where)
        duration = data.get("duration_s")
        requests = data.get("requests")
        if requests is None:
            requests = max(1, round(rate * _number(data, "duration_s", where)))
        if not (isinstance(requests, int) and 0 < requests <= MAX_REQUESTS):
            raise ScenarioError(f"{where}.requests", f"expected a positive integer up to "
                                f"{MAX_REQUESTS:,}, got {requests!r}")
        window = float(duration) if duration is not None and _positive(duration) \
            else requests / rate
        return Load("poisson", requests, rate, window)
    requests = _count(data, "requests", where)
    if arrival == "burst":
        return Load("burst", requests)
    return Load("concurrency", requests, concurrency=_count(data, "concurrency", where))


def measured(data: Mapping[str, Any], where: str) -> Measured:
    unknown = sorted(set(data) - set(MEASURED_KEYS))
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}", "unknown measurement",
                            ", ".join(MEASURED_KEYS))
    stats: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        values = data.get(f"{metric}_ms")
        if values is None:
            continue
        values = _mapping(values, f"{where}.{metric}_ms")
        for statistic, value in values.items():
            if statistic not in STATISTICS or not _positive(value):
                raise ScenarioError(f"{where}.{metric}_ms.{statistic}", f"got {value!r}",
                                    f"{', '.join(STATISTICS)}: positive numbers (ms)")
        stats[metric] = {k: float(v) for k, v in values.items()}
    optional = {}
    for key in ("requests_per_s", "output_tokens_per_s", "timeout_s", "duration_s"):
        value = data.get(key)
        if value is not None and not _positive(value):
            raise ScenarioError(f"{where}.{key}", f"expected a positive number, got {value!r}")
        optional[key] = None if value is None else float(value)
    if not stats and optional["requests_per_s"] is None:
        raise ScenarioError(where, "measures nothing: needs a latency (ttft_ms, tpot_ms, "
                            "itl_ms, e2e_ms) or requests_per_s")
    completed, failed = data.get("completed"), data.get("failed", 0)
    for key, value in (("completed", completed), ("failed", failed)):
        if value is not None and not (isinstance(value, int) and value >= 0):
            raise ScenarioError(f"{where}.{key}", f"expected a count, got {value!r}")
    return Measured(stats, optional["requests_per_s"], optional["output_tokens_per_s"],
                    completed, failed or 0, optional["timeout_s"], optional["duration_s"])


def _length(value: Any, where: str) -> Mapping[str, Any]:
    dist = _mapping(value, where)
    kind = dist.get("type")
    if kind == "constant" and _positive(dist.get("value")):
        return dict(dist)
    if kind == "uniform" and _positive(dist.get("low")) and _positive(dist.get("high")) \
            and dist["low"] < dist["high"]:
        return dict(dist)
    values = dist.get("values")
    if kind == "empirical" and isinstance(values, list) and values and all(
            _positive(v) for v in values):
        return dict(dist)
    raise ScenarioError(where, f"expected {{type: constant, value: N}}, {{type: uniform, "
                        f"low: A, high: B}} or {{type: empirical, values: [...]}} (tokens), "
                        f"got {str(value)[:80]}")


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) \
        and math.isfinite(value) and value > 0


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(where, f"expected a mapping, got {type(value).__name__}")
    return value


def _count(data: Mapping[str, Any], key: str, where: str) -> int:
    """A positive whole number of requests (or clients), at most a run's `MAX_REQUESTS`."""
    value = _number(data, key, where)
    if value > MAX_REQUESTS:
        raise ScenarioError(f"{where}.{key}", f"expected at most {MAX_REQUESTS:,}, got {value:g}")
    return int(value)


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if value is None or not _positive(value):
        raise ScenarioError(f"{where}.{key}", f"expected a positive number, got {value!r}")
    return float(value)


def _text(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}.{key}", f"expected text, got {value!r}")
    return value
