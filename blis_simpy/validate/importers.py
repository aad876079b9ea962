"""A user's own benchmark output as a measured set (validate/sets.py), so `blis-simpy calibrate`
and `validate-real` read what the common clients write:

- vLLM's serving benchmark (`vllm bench serve --save-result`, `benchmark_serving.py`): one JSON
  object per run; its per-request arrays when saved with `--save-detailed`;
- SGLang's `sglang.bench_serving --output-file`: one JSON object per line, one line per run;
- GuideLLM (`guidellm benchmark --output-path x.json`): a `benchmarks` list, one per rate;
- inference-perf: a folder in inference-sim/training's layout (exp-config.yaml, results/) or a
  results folder of `stage_N_lifecycle_metrics.json` files;
- per-request CSV or JSONL (what `blis-simpy observe` writes): one row per request with its
  arrival, prompt and output tokens, TTFT and end-to-end latency.

None of these files says which GPU, how many of them or which server build ran: those come
from the caller (`Hints`, the command line's --model/--gpu/--tp/--server). What a file leaves
out is left to the model's defaults and listed in the set's `guesses`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.validate.sets import (
    STATISTICS,
    Hints,
    MeasuredSet,
    length_distribution,
    parse,
    summary_stats,
)

FORMATS = ("auto", "vllm", "sglang", "guidellm", "inference-perf", "requests", "set")


def read(path: Path, hints: Hints, fmt: str = "auto") -> MeasuredSet:
    """The measured set in `path` (a file or an inference-perf folder), read as `fmt`."""
    if fmt not in FORMATS:
        raise ScenarioError("--format", f"got {fmt!r}", ", ".join(FORMATS))
    if not path.exists() and not path.is_symlink():  # a link loop: read_text says so
        raise ScenarioError(str(path), "does not exist")
    if path.is_dir() or fmt == "inference-perf":
        from blis_simpy.validate.ground_truth import read_folder
        return read_folder(path, hints)
    text = _text(path)
    if fmt == "auto":
        fmt = detect(path, text)
    if fmt == "set":
        return parse(_json(text, path), str(path))
    if fmt == "requests":
        rows = _jsonl(text, path) if path.suffix != ".csv" else list(csv.DictReader(
            text.splitlines()))
        return _finish(path, hints, [requests_stage(rows, path)], "per-request records")
    if fmt == "sglang":
        runs = _jsonl(text, path)
        return _finish(path, hints, [sglang_stage(run, i) for i, run in enumerate(runs)],
                       "sglang.bench_serving")
    data = _json(text, path)
    if fmt == "guidellm":
        return _finish(path, hints, guidellm_stages(data, path), "GuideLLM")
    return _finish(path, hints, [vllm_stage(data, path)], "vLLM's serving benchmark")


def detect(path: Path, text: str) -> str:
    """The format of a file, from its shape."""
    if path.suffix == ".csv":
        return "requests"
    stripped = text.lstrip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        if "stages" in data and "set" in data:
            return "set"
        if "benchmarks" in data:
            return "guidellm"
        if "request_throughput" in data or "mean_ttft_ms" in data:
            return "vllm"
        if "mean_e2e_latency_ms" in data or "median_e2e_latency_ms" in data:
            return "sglang"
        raise ScenarioError(str(path), "is a JSON object of no known benchmark format",
                            "vLLM (request_throughput, mean_ttft_ms), GuideLLM (benchmarks), "
                            "a measured set (set, stages); or --format")
    if stripped.startswith("{"):
        try:
            first = json.loads(stripped.splitlines()[0])
        except json.JSONDecodeError as exc:
            raise ScenarioError(str(path), f"is not valid JSON nor JSON lines: {exc}") \
                from None
        if isinstance(first, dict) and ("ttft_ms" in first or "ttft_s" in first):
            return "requests"
        return "sglang"
    raise ScenarioError(str(path), "is neither JSON, JSON lines nor CSV")


# ---- vLLM ------------------------------------------------------------------------------------

def vllm_stage(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """One run of vLLM's serving benchmark. Its ITL is the per-token gap, its TPOT the
    per-request (E2E - TTFT) / (output - 1); both are kept under their names."""
    completed = _int(data, "completed", path)
    measured: dict[str, Any] = {"completed": completed,
                                "failed": int(data.get("failed", 0) or 0)}
    for metric, key in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el")):
        stats = {}
        for statistic in STATISTICS:
            value = data.get(f"{statistic}_{key}_ms")
            if _is_positive(value):
                stats[statistic] = float(value)
        if stats:
            measured[f"{metric}_ms"] = stats
    _copy_positive(data, measured, "request_throughput", "requests_per_s")
    _copy_positive(data, measured, "output_throughput", "output_tokens_per_s")
    _copy_positive(data, measured, "duration", "duration_s")
    lengths = _lengths(data, completed, path)
    prompts = data.get("num_prompts")
    return {"name": _run_name(data), "load": _load(data.get("request_rate"),
                                                   data.get("max_concurrency"),
                                                   prompts if _is_count(prompts) and prompts
                                                   else completed, measured.get("duration_s")),
            **lengths, "model": data.get("model_id"), "measured": measured}


def _lengths(data: Mapping[str, Any], completed: int, path: Path) -> dict[str, Any]:
    """Prompt and output lengths: the per-request arrays when saved, else the totals'
    means."""
    out = {}
    for side, per_request, total in (("prompt", "input_lens", "total_input_tokens"),
                                     ("output", "output_lens", "total_output_tokens")):
        values = data.get(per_request)
        if isinstance(values, list) and values and all(
                isinstance(v, int) and v > 0 for v in values):
            out[side] = length_distribution(values)
        else:
            tokens = data.get(total)
            if not _is_positive(tokens):
                raise ScenarioError(f"{path}: {total}", "needs the total (or per-request "
                                    f"{per_request}) to know the {side} lengths")
            out[side] = {"type": "constant", "value": max(1, round(tokens / completed))}
    return out


def _load(rate: Any, concurrency: Any, requests: int, duration: float | None
          ) -> dict[str, Any]:
    if _is_count(concurrency) and concurrency > 0 and (
            rate in (None, "inf", float("inf")) or (isinstance(rate, float)
                                                     and math.isinf(rate))):
        return {"arrival": "concurrency", "concurrency": concurrency, "requests": requests}
    if isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate) \
            and rate > 0:
        return {"arrival": "poisson", "rate": float(rate), "requests": requests}
    return {"arrival": "burst", "requests": requests}


def _run_name(data: Mapping[str, Any]) -> str:
    rate = data.get("request_rate")
    conc = data.get("max_concurrency")
    if _is_count(conc) and conc > 0:
        return f"concurrency-{conc}"
    if _is_positive(rate):
        return f"rate-{rate:g}"
    return "burst"


# ---- SGLang ----------------------------------------------------------------------------------

def sglang_stage(run: Any, index: int) -> dict[str, Any]:
    where = f"run {index + 1}"
    if not isinstance(run, dict):
        raise ScenarioError(where, f"expected a JSON object, got {type(run).__name__}")
    completed = run.get("completed")
    if not _is_count(completed) or completed <= 0:
        raise ScenarioError(f"{where}: completed", f"expected a positive count, got "
                            f"{completed!r}")
    measured: dict[str, Any] = {"completed": completed, "failed": 0}
    for metric, key in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"),
                        ("e2e", "e2e_latency")):
        stats = {s: float(run[f"{s}_{key}_ms"]) for s in ("mean", "median", "p90", "p99")
                 if _is_positive(run.get(f"{s}_{key}_ms"))}
        if stats:
            measured[f"{metric}_ms"] = stats
    duration = run.get("duration")
    if _is_positive(duration):
        measured["duration_s"] = float(duration)
        measured["requests_per_s"] = completed / float(duration)
    _copy_positive(run, measured, "output_throughput", "output_tokens_per_s")
    lengths = {}
    for side, total, upper in (("prompt", "total_input_tokens", "random_input_len"),
                               ("output", "total_output_tokens", "random_output_len")):
        tokens = run.get(total)
        if not _is_positive(tokens):
            raise ScenarioError(f"{where}: {total}", f"expected a positive token count, got "
                                f"{tokens!r}")
        mean = float(tokens) / completed
        high = run.get(upper)
        if run.get("dataset_name") == "random" and _is_count(high) \
                and run.get("random_range_ratio") != 1.0 and 1 <= 2 * mean - high < high:
            lengths[side] = {"type": "uniform", "low": float(round(2 * mean - high)),
                             "high": float(high + 1)}
        else:
            lengths[side] = {"type": "constant", "value": max(1, round(mean))}
    name = _run_name(run)
    return {"name": f"{index}-{name}", "load": _load(run.get("request_rate"),
                                                      run.get("max_concurrency"), completed,
                                                      measured.get("duration_s")),
            **lengths, "measured": measured}


def _is_positive(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ---- GuideLLM --------------------------------------------------------------------------------

def guidellm_stages(data: Mapping[str, Any], path: Path) -> list[dict[str, Any]]:
    """Each GuideLLM benchmark (one per rate of a sweep), from its metric summaries."""
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ScenarioError(f"{path}: benchmarks", "needs at least one benchmark")
    stages = []
    for i, bench in enumerate(benchmarks):
        where = f"{path}: benchmarks[{i}]"
        metrics = bench.get("metrics") if isinstance(bench, dict) else None
        if not isinstance(metrics, dict):
            raise ScenarioError(where, "has no metrics")
        measured: dict[str, Any] = {}
        for metric, keys in (("ttft", ("time_to_first_token_ms",)),
                             ("tpot", ("time_per_output_token_ms",)),
                             ("itl", ("inter_token_latency_ms",)),
                             ("e2e", ("request_latency",))):
            summary = _guidellm_summary(metrics, keys)
            if summary:
                scale = 1000.0 if metric == "e2e" else 1.0  # request_latency is in seconds
                measured[f"{metric}_ms"] = {k: v * scale for k, v in summary.items()}
        rps = _guidellm_summary(metrics, ("requests_per_second",))
        if rps.get("mean"):
            measured["requests_per_s"] = rps["mean"]
        counts = bench.get("request_totals") or bench.get("run_stats", {}).get(
            "requests_made") or {}
        completed = counts.get("successful") if isinstance(counts, dict) else None
        if _is_count(completed):
            measured["completed"] = completed
            errored = counts.get("errored", 0)
            measured["failed"] = errored if _is_count(errored) else 0
        prompt = _guidellm_summary(metrics, ("prompt_token_count",)).get("mean")
        output = _guidellm_summary(metrics, ("output_token_count",)).get("mean")
        if not prompt or not output:
            raise ScenarioError(where, "needs prompt_token_count and output_token_count")
        strategy = _guidellm_strategy(bench)
        requests = completed or 100
        kind = strategy.get("type_") or strategy.get("type")
        if kind in ("constant", "poisson") and _is_positive(strategy.get("rate")):
            load = {"arrival": "poisson", "rate": float(strategy["rate"]), "requests": requests}
        elif kind == "concurrent" and _is_count(strategy.get("streams")) \
                and strategy["streams"] > 0:
            load = {"arrival": "concurrency", "concurrency": strategy["streams"],
                    "requests": requests}
        elif kind == "synchronous":
            load = {"arrival": "concurrency", "concurrency": 1, "requests": requests}
        else:
            load = {"arrival": "burst", "requests": requests}
        stages.append({"name": f"{i}-{kind or 'throughput'}", "load": load,
                       "prompt": {"type": "constant", "value": max(1, round(prompt))},
                       "output": {"type": "constant", "value": max(1, round(output))},
                       "measured": measured})
    return stages


def _guidellm_summary(metrics: Mapping[str, Any], keys: Sequence[str]) -> dict[str, float]:
    for key in keys:
        entry = metrics.get(key)
        if isinstance(entry, dict):
            entry = entry.get("successful", entry)
        if not isinstance(entry, dict):
            continue
        out = {}
        for ours, theirs in (("mean", "mean"), ("median", "median")):
            value = entry.get(theirs)
            if _is_positive(value):
                out[ours] = float(value)
        pct = entry.get("percentiles")
        if isinstance(pct, dict):
            for ours in ("p90", "p99"):
                value = pct.get(ours)
                if _is_positive(value):
                    out[ours] = float(value)
        if out:
            return out
    return {}


def _guidellm_strategy(bench: Mapping[str, Any]) -> Mapping[str, Any]:
    for path in (("args", "strategy"), ("config", "strategy"), ("scheduler", "strategy")):
        node: Any = bench
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            return node
    return {}


# ---- per-request records ---------------------------------------------------------------------

def requests_stage(rows: list[Any], path: Path) -> dict[str, Any]:
    """A stage from one record per request: `arrival_s` (or `start_s`), `input_tokens`,
    `output_tokens`, `ttft_ms` (or `ttft_s`), `e2e_ms` (or `e2e_s`/`latency_s`); a missing
    or failed request is one with `error` set. Arrivals give the rate (requests over their
    span), the lengths their own distribution."""
    good = []
    failed = 0
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ScenarioError(f"{path}: row {i + 1}", "expected a record")
        if row.get("error") not in (None, "", "None"):
            failed += 1
            continue
        good.append(_request(row, f"{path}: row {i + 1}"))
    if len(good) < 2:
        raise ScenarioError(str(path), f"holds {len(good)} successful request(s); at least 2 "
                            "are needed to read a load")
    arrivals = sorted(r["arrival"] for r in good)
    span = arrivals[-1] - arrivals[0]
    ends = max(r["arrival"] + r["e2e"] / 1e3 for r in good)
    measured: dict[str, Any] = {"completed": len(good), "failed": failed,
                                "duration_s": ends - arrivals[0]}
    measured["requests_per_s"] = len(good) / measured["duration_s"]
    for metric in ("ttft", "e2e", "tpot"):
        values = [r[metric] for r in good if r.get(metric) is not None]
        if values:
            measured[f"{metric}_ms"] = summary_stats(values)
    if span <= 0:
        load: dict[str, Any] = {"arrival": "burst", "requests": len(good)}
    else:
        load = {"arrival": "poisson", "rate": (len(good) - 1) / span, "requests": len(good)}
    return {"name": path.stem, "load": load,
            "prompt": length_distribution([int(r["input"]) for r in good]),
            "output": length_distribution([int(r["output"]) for r in good]),
            "measured": measured}


def _request(row: Mapping[str, Any], where: str) -> dict[str, float]:
    def number(*keys: str, scale: tuple[float, ...]) -> float | None:
        for key, k in zip(keys, scale, strict=True):
            value = row.get(key)
            if value not in (None, ""):
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    raise ScenarioError(f"{where}: {key}", f"expected a number, got "
                                        f"{value!r}") from None
                if not math.isfinite(number) or number < 0:
                    raise ScenarioError(f"{where}: {key}", f"expected a number >= 0, got "
                                        f"{value!r}")
                return number * k
        return None

    found = {"arrival": number("arrival_s", "start_s", "timestamp", scale=(1.0, 1.0, 1.0)),
             "input": number("input_tokens", "prompt_tokens", scale=(1.0, 1.0)),
             "output": number("output_tokens", "completion_tokens", scale=(1.0, 1.0)),
             "ttft": number("ttft_ms", "ttft_s", scale=(1.0, 1e3)),
             "e2e": number("e2e_ms", "e2e_s", "latency_s", scale=(1.0, 1e3, 1e3))}
    out: dict[str, float] = {}
    for key, names in (("arrival", "arrival_s"), ("input", "input_tokens"),
                       ("output", "output_tokens"), ("ttft", "ttft_ms"), ("e2e", "e2e_ms")):
        value = found[key]
        if value is None:
            raise ScenarioError(where, f"needs {names}")
        out[key] = value
    out["input"], out["output"] = max(1, round(out["input"])), max(1, round(out["output"]))
    if out["output"] > 1:
        out["tpot"] = (out["e2e"] - out["ttft"]) / (out["output"] - 1)
    return out


# ---- shared ----------------------------------------------------------------------------------

def _finish(path: Path, hints: Hints, stages: list[dict[str, Any]], client: str
            ) -> MeasuredSet:
    model = hints.model or next((s.get("model") for s in stages if s.get("model")), None)
    if not model:
        raise ScenarioError(str(path), "does not name the model: give --model")
    for stage in stages:
        stage.pop("model", None)
    data = {
        "set": path.stem, "title": f"{client} results in {path.name}",
        "source": {"file": str(path)}, "measured_by": client,
        "known": [f"read from {path.name} ({client})"],
        "guesses": [f"GPU {hints.gpu} x {hints.tp}, server {hints.server} {hints.version}"
                    " (from the command line)",
                    "engine limits: " + (", ".join(f"{k} {v}" for k, v in hints.engine.items())
                                         or "blis-simpy's defaults, KV cache from memory")],
        "defaults": {"model": model, "gpu": hints.gpu, "tp": hints.tp,
                     "server": {"family": hints.server, "version": hints.version},
                     "engine": dict(hints.engine)},
        "stages": stages}
    return parse(data, str(path))


def _copy_positive(data: Mapping[str, Any], out: dict[str, Any], theirs: str, ours: str
                   ) -> None:
    value = data.get(theirs)
    if _is_positive(value):
        out[ours] = float(value)


def _int(data: Mapping[str, Any], key: str, path: Path) -> int:
    value = data.get(key)
    if not _is_count(value) or value <= 0:
        raise ScenarioError(f"{path}: {key}", f"expected a positive count, got {value!r}")
    return value


def _text(path: Path) -> str:
    return read_text(path, "", "a benchmark result: JSON, JSON lines or CSV text")


def _json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(str(path), f"is not valid JSON: {exc}") from None


def _jsonl(text: str, path: Path) -> list[Any]:
    out = []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{path}: line {i + 1}", f"is not valid JSON: {exc}") \
                from None
    if not out:
        raise ScenarioError(str(path), "holds no record")
    return out
