"""Real serving runs in the ground-truth layout of github.com/inference-sim/training
(`default_args/`): a folder of experiment folders, each with `exp-config.yaml` (model, tensor
parallelism, vLLM engine limits), `profile.yaml` (the inference-perf load as asked) and
`results/` (`config.yaml`, the load as the tool ran it, and one
`stage_N_lifecycle_metrics.json` per rate stage with the client's measurements).

Read into frozen values, every problem reported as a ScenarioError naming the file and key, so
a wrong folder fails in one line before anything runs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from blis_simpy.core.errors import ScenarioError

STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json")


@dataclass(frozen=True, slots=True)
class Measured:
    """What the client measured in one stage, in ms (means over the successful requests).

    inference-perf's own ITL/TPOT figures are about half the true interval between tokens (it
    spreads each streamed chunk's time over more tokens than the server sent), so the ITL
    used here is derived: (mean E2E - mean TTFT) / (output length - 1)."""
    e2e_ms: float
    ttft_ms: float
    itl_ms: float
    requests_per_s: float
    successes: int
    failures: int  # requests the client gave up on (its timeout): the stage is censored
    timeout_s: float | None = None  # the client's timeout, as its failures show it

    @property
    def completed_pct(self) -> float:
        """Requests that finished before the client's timeout, in percent of those sent."""
        return 100.0 * self.successes / max(self.successes + self.failures, 1)


@dataclass(frozen=True, slots=True)
class Stage:
    """One rate stage, drained on its own: Poisson arrivals at `rate` for `duration_s`."""
    experiment: str
    index: int
    rate: float
    duration_s: float
    prompt_len: int  # median measured prompt length (tokens)
    output_len: int  # median measured output length (tokens; outputs ran with ignore_eos)
    measured: Measured

    @property
    def name(self) -> str:
        return f"{self.experiment}/{self.index}"

    @property
    def censored(self) -> bool:
        """The client abandoned requests: its means cover only those that finished in time."""
        return self.measured.failures > 0


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    folder: Path
    model: str
    tp: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    prompts: int  # distinct prompts the load cycled (num_groups x num_prompts_per_group)
    stages: tuple[Stage, ...]

    @property
    def workload(self) -> str:
        """The load's name, the folder name's last part (general, codegen, roleplay, ...)."""
        return self.name.rsplit("-", 1)[-1]


def read_experiments(root: Path) -> list[Experiment]:
    """Every experiment folder under `root` (sorted by name)."""
    if not root.is_dir():
        raise ScenarioError(str(root), "is not a folder (expected a folder of experiment "
                            "folders, e.g. default_args/ of inference-sim/training)")
    folders = sorted(p for p in root.iterdir() if (p / "exp-config.yaml").is_file())
    if not folders:
        raise ScenarioError(str(root), "holds no experiment folder (none has exp-config.yaml)")
    return [read_experiment(folder) for folder in folders]


def read_experiment(folder: Path) -> Experiment:
    exp = _mapping(_yaml(folder / "exp-config.yaml"), folder / "exp-config.yaml")
    run_config = folder / "results" / "config.yaml"
    run = _mapping(_yaml(run_config), run_config)
    data = _mapping(run.get("data") or {}, run_config)
    shared = _mapping(data.get("shared_prefix") or {}, run_config)
    stages_asked = _mapping(run.get("load") or {}, run_config).get("stages")
    if not isinstance(stages_asked, list) or not stages_asked:
        raise ScenarioError(f"{run_config}: load.stages", "needs at least one stage")
    stages = []
    for path in sorted((folder / "results").glob("stage_*_lifecycle_metrics.json")):
        match = STAGE_FILE.fullmatch(path.name)
        if match is None:
            continue
        index = int(match.group(1))
        if index >= len(stages_asked):
            raise ScenarioError(str(path), f"stage {index} is not in {run_config} load.stages")
        asked = _mapping(stages_asked[index], run_config)
        stages.append(read_stage(path, folder.name, index, _number(asked, "rate", run_config),
                                 _number(asked, "duration", run_config)))
    if not stages:
        raise ScenarioError(str(folder / "results"), "has no stage_N_lifecycle_metrics.json")
    where = folder / "exp-config.yaml"
    return Experiment(
        name=folder.name, folder=folder, model=_text(exp, "model", where),
        tp=int(_number(exp, "tensor_parallelism", where)),
        max_model_len=int(_number(exp, "max_model_len", where)),
        max_num_batched_tokens=int(_number(exp, "max_num_batched_tokens", where)),
        max_num_seqs=int(_number(exp, "max_num_seqs", where)),
        prompts=int(shared.get("num_groups") or 10)
        * int(shared.get("num_prompts_per_group") or 10),
        stages=tuple(stages))


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


def read_stage(path: Path, experiment: str, index: int, rate: float, duration: float) -> Stage:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ok = data["successes"]
        latency = ok["latency"]
        e2e = float(latency["request_latency"]["mean"]) * 1e3
        ttft = float(latency["time_to_first_token"]["mean"]) * 1e3
        output_len = round(float(ok["output_len"]["median"]))
        prompt_len = round(float(ok["prompt_len"]["median"]))
        measured = Measured(
            e2e_ms=e2e, ttft_ms=ttft, itl_ms=(e2e - ttft) / max(output_len - 1, 1),
            requests_per_s=float(ok["throughput"]["requests_per_sec"]),
            successes=int(ok["count"]), failures=int(data.get("failures", {}).get("count", 0)),
            timeout_s=client_timeout(data.get("failures")))
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(path), f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(str(path), f"is not valid JSON: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioError(str(path), f"is not an inference-perf lifecycle-metrics file "
                            f"(successes.latency / output_len / prompt_len: {exc!r})") from None
    if not all(math.isfinite(x) for x in (e2e, ttft)) or output_len < 1 or prompt_len < 2:
        raise ScenarioError(str(path), "has non-finite latencies or empty prompts/outputs")
    return Stage(experiment, index, rate, duration, prompt_len, output_len, measured)


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(path), f"is not valid YAML: {str(exc).splitlines()[0]}") \
            from None


def _mapping(value: Any, where: Path) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(str(where), f"expected a mapping, got {type(value).__name__}")
    return value


def _number(data: Mapping[str, Any], key: str, where: Path) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ScenarioError(f"{where}: {key}", f"expected a positive number, got {value!r}")
    return float(value)


def _text(data: Mapping[str, Any], key: str, where: Path) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}: {key}", f"expected a model id, got {value!r}")
    return value
