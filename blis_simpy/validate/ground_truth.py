"""Real serving runs in inference-perf's result layout, as a measured set (validate/sets.py):
a folder of experiment folders as github.com/inference-sim/training keeps them
(`default_args/`: each with `exp-config.yaml`, the vLLM engine limits, and `results/`), one
such experiment folder, or a bare `results/` folder (`config.yaml`, the load as the tool ran
it, and one `stage_N_lifecycle_metrics.json` per rate stage).

inference-perf's own ITL/TPOT is about half the true interval between tokens (it spreads each
streamed chunk's time over more tokens than the server sent), so only its E2E and TTFT are
read; TPOT is compared as (mean E2E - mean TTFT) / (output length - 1). A shared-prefix load
cycles `num_groups x num_prompts_per_group` prompts (`distinct_prompts`), and with
`ignore_eos` every output is `output_len` tokens. Stages in which the client gave up on
requests carry its timeout (the whole seconds below the quickest failure's latency).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.yamlio import load_yaml
from blis_simpy.validate.sets import Hints, MeasuredSet, parse

STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json")


def read_folder(root: Path, hints: Hints) -> MeasuredSet:
    """A folder of experiment folders, one experiment folder, or one results folder."""
    if not root.is_dir():
        raise ScenarioError(str(root), "is not a folder (expected inference-perf results: "
                            "experiment folders with exp-config.yaml and results/)")
    if any((root / name).exists() for name in ("exp-config.yaml", "results", "config.yaml")):
        folders = [root]
    else:
        folders = sorted(p for p in root.iterdir() if (p / "exp-config.yaml").is_file())
    if not folders:
        measured = [p.name for p in sorted(root.iterdir()) if p.suffix in (".json", ".jsonl")]
        raise ScenarioError(str(root), "holds no experiment folder (none has exp-config.yaml)"
                            + (f"; give a file of it instead: {root / measured[0]}"
                               if measured else ""))
    stages = [stage for folder in folders for stage in experiment_stages(folder, hints)]
    data = {"set": root.name, "title": f"inference-perf results in {root}",
            "source": {"folder": str(root)}, "measured_by": "inference-perf",
            "known": ["TPOT compared as (mean E2E - mean TTFT) / (output - 1): inference-perf's "
                      "own ITL is not the interval between tokens"],
            "guesses": ["prompt length: the client's median (re-tokenised) prompt length",
                        f"GPU {hints.gpu}, server {hints.server} {hints.version} (from the "
                        "command line)"],
            "defaults": {"gpu": hints.gpu, "server": {"family": hints.server,
                                                      "version": hints.version}},
            "stages": stages}
    return parse(data, str(root))


def experiment_stages(folder: Path, hints: Hints) -> list[dict[str, Any]]:
    results = folder / "results" if (folder / "results").is_dir() else folder
    exp_path = folder / "exp-config.yaml"
    exp = _mapping(_yaml(exp_path), exp_path) if exp_path.is_file() else {}
    run_config = results / "config.yaml"
    run = _mapping(_yaml(run_config), run_config)
    data = _mapping(run.get("data") or {}, run_config)
    shared = _mapping(data.get("shared_prefix") or {}, run_config)
    server = _mapping(run.get("server") or {}, run_config)
    stages_asked = _mapping(run.get("load") or {}, run_config).get("stages")
    if not isinstance(stages_asked, list) or not stages_asked:
        raise ScenarioError(f"{run_config}: load.stages", "needs at least one stage")
    model = exp.get("model") or hints.model or server.get("model_name")
    if not isinstance(model, str) or not model:
        raise ScenarioError(str(exp_path), "names no model (exp-config.yaml model, or --model)")
    engine = {ours: exp[theirs] for ours, theirs in (
        ("max_num_seqs", "max_num_seqs"), ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("max_model_len", "max_model_len")) if isinstance(exp.get(theirs), int)}
    engine.update(hints.engine)
    distinct = int(shared.get("num_groups") or 0) * int(shared.get("num_prompts_per_group") or 0)
    output_len = shared.get("output_len") if server.get("ignore_eos") else None
    name = folder.name.split("-", 2)[-1] if re.match(r"\d{8}-\d{6}-", folder.name) \
        else folder.name
    out = []
    for path in sorted(results.glob("stage_*_lifecycle_metrics.json")):
        match = STAGE_FILE.fullmatch(path.name)
        if match is None:
            continue
        index = int(match.group(1))
        if index >= len(stages_asked):
            raise ScenarioError(str(path), f"stage {index} is not in {run_config} load.stages")
        asked = _mapping(stages_asked[index], run_config)
        stage = read_stage(path, asked, output_len, run_config)
        stage.update(name=f"{name}/{index}", model=model, tp=exp.get("tensor_parallelism",
                                                                     hints.tp), engine=engine)
        if distinct:
            stage["distinct_prompts"] = distinct
        out.append(stage)
    if not out:
        raise ScenarioError(str(results), "has no stage_N_lifecycle_metrics.json")
    return out


def read_stage(path: Path, asked: Mapping[str, Any], output_len: Any, where: Path
               ) -> dict[str, Any]:
    try:
        data = json.loads(read_text(path, "", "an inference-perf lifecycle-metrics JSON file"))
        ok = data["successes"]
        latency = ok["latency"]
        measured: dict[str, Any] = {
            "e2e_ms": _stats(latency["request_latency"]),
            "ttft_ms": _stats(latency["time_to_first_token"]),
            "requests_per_s": float(ok["throughput"]["requests_per_sec"]),
            "completed": int(ok["count"]),
            "failed": int((data.get("failures") or {}).get("count") or 0)}
        tokens_per_s = ok["throughput"].get("output_tokens_per_sec")
        if isinstance(tokens_per_s, int | float) and tokens_per_s > 0:
            measured["output_tokens_per_s"] = float(tokens_per_s)
        prompt = round(float(ok["prompt_len"]["median"]))
        output = output_len or round(float(ok["output_len"]["median"]))
    except json.JSONDecodeError as exc:
        raise ScenarioError(str(path), f"is not valid JSON: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioError(str(path), f"is not an inference-perf lifecycle-metrics file "
                            f"(successes.latency / throughput / prompt_len: {exc!r})") from None
    timeout = client_timeout(data.get("failures"))
    if timeout is not None:
        measured["timeout_s"] = timeout
    rate = asked.get("rate")
    duration = asked.get("duration")
    if not (isinstance(rate, int | float) and rate > 0 and isinstance(duration, int | float)
            and duration > 0):
        raise ScenarioError(f"{where}: load.stages", "every stage needs a rate and a duration")
    return {"load": {"arrival": "poisson", "rate": float(rate), "duration_s": float(duration)},
            "prompt": {"type": "constant", "value": max(2, prompt)},
            "output": {"type": "constant", "value": max(1, int(output))},
            "measured": measured}


def _stats(values: Mapping[str, Any]) -> dict[str, float]:
    """mean/median/p90/p99 of a lifecycle-metrics latency, seconds to ms."""
    out = {}
    for key in ("mean", "median", "p90", "p99"):
        value = values.get(key)
        if isinstance(value, int | float) and math.isfinite(value) and value > 0:
            out[key] = float(value) * 1e3
    return out


def client_timeout(failures: Any) -> float | None:
    """The client's timeout: the whole seconds below the quickest failure's latency (the
    failed requests all ended when the client gave up, e.g. 300.0007 s for a 300 s timeout);
    None without failures or without their latencies."""
    if not isinstance(failures, dict) or not failures.get("count"):
        return None
    latency = failures.get("request_latency")
    quickest = latency.get("min") if isinstance(latency, dict) else None
    if not isinstance(quickest, int | float) or not math.isfinite(quickest) or quickest < 1:
        return None
    return float(math.floor(quickest))


def _yaml(path: Path) -> Any:
    return load_yaml(read_text(path, "", "an inference-perf YAML file"), str(path))


def _mapping(value: Any, where: Path) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(str(where), f"expected a mapping, got {type(value).__name__}")
    return value
