"""The physical step model's coefficients: one set per server family, shipped in the package
(data/step_models/<family>.json), or a file `blis-simpy calibrate` wrote for a user's server.

Every coefficient multiplies one physical quantity (engine/physical.py), so each has a prior
from physics and is fitted only from data that exercises it; a set records what it was fitted
on, which coefficients the data could not identify (left at their prior) and the accuracy
measured on data held out from the fit (docs/accuracy.md).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from blis_simpy.config.catalog import data_dir
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text

STEP_DIR = "step_models"
DEFAULT_FAMILY = "vllm"


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    """What one step and one request cost beyond the physics (engine/physical.py).

    The multipliers (weights ... link) scale times computed at the GPU's achievable rates
    (config/hardware.py), so 1.0 means "as fast as microbenchmarks reach"; the others are
    microseconds."""

    step_us: float  # per engine step: scheduling, launches, sampling set-up
    request_us: float  # per request in a step: input preparation, sampling, output handling
    weights: float  # x time to stream the weights the step touches from memory
    kv_reads: float  # x time to read every request's KV cache
    gemm: float  # x time of the linear layers' FLOPs (whichever of weights and gemm is longer)
    attention: float  # x time of the attention FLOPs (prefill chunks over their context)
    allreduce: float  # x the GPU's small all-reduce latency, 2 per layer when tensor-parallel
    link: float  # x time to move the all-reduced hidden states over the link
    api_fixed_us: float  # per request, before the engine queue, not serial (network, hand-off)
    api_request_us: float  # per request, serial in the API server (parsing, templating)
    api_input_token_us: float  # per prompt token, serial in the API server (tokenising)
    api_output_token_us: float  # per streamed token, serial in the API server (detokenising)
    intake_steps: float  # x the step under way when a request reaches the engine: how far
    # behind the running step the engine takes new requests in
    graph_layer_us: float = 0.0  # per layer of a step larger than the server's captured
    # graphs (CUDA graphs, torch.compile): launches and unfused kernels; 0 in a file without it

    @classmethod
    def from_mapping(cls, data: Any, where: str) -> StepCoefficients:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping of coefficients, got "
                             f"{type(data).__name__}")
        names = [f.name for f in fields(cls)]
        optional = {f.name: f.default for f in fields(cls) if isinstance(f.default, float)}
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"{where}: unknown coefficient {unknown[0]!r}; known: "
                             f"{', '.join(names)}")
        values = {}
        for name in names:
            value = data.get(name, optional.get(name))
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and 0 <= value < 1e9):
                raise ValueError(f"{where}: coefficient {name!r} must be a number in "
                                 f"[0, 1e9), got {value!r}")
            values[name] = float(value)
        return cls(**values)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


NAMES = tuple(f.name for f in fields(StepCoefficients))
# The multipliers of the GPU's kernels: a set may give them per GPU (`gpus`), fitted where the
# data ran on that GPU; the host costs are the server's, one value for every GPU.
KERNEL = ("weights", "kv_reads", "gemm", "attention", "allreduce", "link")
HOST = tuple(name for name in NAMES if name not in KERNEL)


@dataclass(frozen=True, slots=True)
class CoefficientSet:
    """A coefficient set and what is known about it (the file's other keys)."""

    name: str  # the bundled family, or the file's path
    family: str  # the server family it describes (vllm, sglang, ...)
    coefficients: StepCoefficients  # on a GPU the set has no kernel multipliers for
    gpus: dict[str, dict[str, float]]  # GPU name -> its kernel multipliers
    source: str  # where the coefficients come from, in a sentence
    accuracy: str  # the documented accuracy, in a sentence
    info: dict[str, Any]  # everything else the file says (fit, identification, priors)
    # Does the server mix prefill chunks into decode steps (vLLM), or run a step with prefill
    # work as prefill only, every decode waiting (SGLang unless --enable-mixed-chunk)?
    mixes_prefill: bool = True
    # The largest step (requests) the server runs in its captured graphs by default (vLLM's
    # max_cudagraph_capture_size, SGLang's cuda_graph_max_bs); None: no limit known.
    graph_max_batch: int | None = None

    def for_gpu(self, gpu: str) -> StepCoefficients:
        """The coefficients on `gpu` (its name in the hardware file): its own kernel
        multipliers where the set has them."""
        found = {k.casefold(): v for k, v in self.gpus.items()}.get(gpu.casefold())
        if not found:
            return self.coefficients
        return StepCoefficients(**{**self.coefficients.as_dict(), **found})

    @classmethod
    def from_json(cls, data: Any, name: str) -> CoefficientSet:
        if not isinstance(data, dict):
            raise ValueError(f"{name}: expected a JSON object with 'family' and "
                             "'coefficients'")
        family = data.get("family")
        if not isinstance(family, str) or not family:
            raise ValueError(f"{name}: needs 'family', the server it describes (vllm, sglang)")
        coefficients = StepCoefficients.from_mapping(data.get("coefficients"),
                                                     f"{name}: coefficients")
        gpus = data.get("gpus") or {}
        if not isinstance(gpus, dict):
            raise ValueError(f"{name}: gpus: expected a mapping of GPU name to kernel "
                             "multipliers")
        per_gpu = {}
        for gpu, values in gpus.items():
            where = f"{name}: gpus.{gpu}"
            if not isinstance(values, dict) or set(values) - set(KERNEL):
                raise ValueError(f"{where}: expected kernel multipliers ({', '.join(KERNEL)})")
            checked = StepCoefficients.from_mapping({**coefficients.as_dict(), **values}, where)
            per_gpu[str(gpu)] = {k: getattr(checked, k) for k in values}
        # Not given: the shipped set's of the same family (a file of an SGLang server forms
        # SGLang's steps), else mixed; a shipped set says it itself.
        mixes = data.get("mixes_prefill")
        if mixes is None:
            mixes = name == family or mixes_prefill(family)
        if not isinstance(mixes, bool):
            raise ValueError(f"{name}: mixes_prefill must be true (prefill chunks share a step "
                             "with decodes, as in vLLM) or false (SGLang's default), got "
                             f"{mixes!r}")
        limit = data.get("graph_max_batch")
        if limit is None and name != family:
            limit = graph_max_batch(family)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise ValueError(f"{name}: graph_max_batch must be a whole number of requests "
                             f"(the largest step the server runs in captured graphs), got "
                             f"{limit!r}")
        info = {k: v for k, v in data.items()
                if k not in ("family", "coefficients", "gpus", "mixes_prefill",
                             "graph_max_batch")}
        return cls(name, family, coefficients, per_gpu, str(data.get("source", "")),
                   str(data.get("accuracy", "")), info, mixes, limit)

    def describe(self, gpu: str) -> dict[str, Any]:
        """What a run's outputs say about its step model (summary.json `step_model`)."""
        fitted = gpu.casefold() in {k.casefold() for k in self.gpus}
        return {"type": "physical", "coefficients": self.name, "family": self.family,
                "source": self.source,
                "gpu": (f"kernel multipliers fitted on {gpu}" if fitted else
                        f"no data on {gpu}: the mean of the GPUs the fit identified, else the "
                        "physics prior"),
                "accuracy": self.accuracy}


@functools.cache
def bundled_families() -> tuple[str, ...]:
    """The shipped families, listed once per process (every run's build asks, a search's
    thousands of them)."""
    return tuple(sorted(p.name.removesuffix(".json") for p in (data_dir() / STEP_DIR).iterdir()
                        if p.name.endswith(".json")))


@functools.cache
def bundled(family: str) -> CoefficientSet:
    """A shipped coefficient set by its family name; ValueError lists the shipped ones."""
    if family not in bundled_families():
        raise ValueError(f"no bundled coefficients for server family {family!r}; bundled: "
                         f"{', '.join(bundled_families())} (or a file written by "
                         "blis-simpy calibrate)")
    text = (data_dir() / STEP_DIR / f"{family}.json").read_text(encoding="utf-8")
    return CoefficientSet.from_json(json.loads(text), family)


def mixes_prefill(family: str) -> bool:
    """How a family's engine forms steps: its shipped set's say, else mixed (vLLM's way)."""
    return bundled(family).mixes_prefill if family in bundled_families() else True


def graph_max_batch(family: str) -> int | None:
    """A family's default captured-graph batch limit: its shipped set's, else none known."""
    return bundled(family).graph_max_batch if family in bundled_families() else None


def load(name: str | None) -> CoefficientSet:
    """`latency.coefficients`: a bundled family name, else a JSON file's path."""
    name = name or DEFAULT_FAMILY
    if name in bundled_families():
        return bundled(name)
    path = Path(name)
    if not path.suffix and not path.exists() and not path.is_symlink():
        return bundled(name)  # a family name that is not bundled: say which are
    try:
        data = json.loads(read_text(path, "", "a coefficients JSON file"))
    except ScenarioError as exc:
        raise ValueError(exc.problem) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    return CoefficientSet.from_json(data, str(path))


def outside_fit(scenario: Any) -> list[str]:
    """Run warnings for a native scenario whose physical step model runs on a GPU its
    coefficients have no kernel multipliers of (no measurement on it): the accuracy
    summary.json `step_model` quotes was measured on the fitted GPUs."""
    latency, model = scenario.latency, scenario.model
    if latency.type != "physical":
        return []
    from blis_simpy.config import hardware

    try:
        names = hardware.names(hardware.hardware(latency.hardware_config))
        found = load(latency.coefficients)
    except ValueError:
        return []
    gpu = names.get((model.gpu or "").casefold(), model.gpu or "")
    if gpu.casefold() in {k.casefold() for k in found.gpus}:
        return []
    return [f"step model: no measurements on {gpu} in the {found.name} coefficients (fitted "
            f"on {', '.join(found.gpus) or 'no GPU of its own'}): its kernel rates are the "
            "fitted GPUs' mean, else the physics prior, and the accuracy quoted in "
            "summary.json step_model was measured on those GPUs, not this one"]


def describe(scenario: Any) -> dict[str, Any]:
    """The step model a resolved native scenario runs, where its coefficients come from and
    how accurate it is documented to be (summary.json `step_model`)."""
    latency, model = scenario.latency, scenario.model
    if latency.type == "physical":
        from blis_simpy.config import hardware

        try:
            names = hardware.names(hardware.hardware(latency.hardware_config))
            gpu = names.get((model.gpu or "").casefold(), model.gpu or "")
            return load(latency.coefficients).describe(gpu)
        except ValueError:
            return {"type": "physical", "coefficients": latency.coefficients}
    if latency.type == "roofline":
        return {"type": "roofline", "coefficients": "none fitted: GPU figures of "
                "hardware_native.json (docs/roofline.md)",
                "accuracy": "docs/accuracy.md, native roofline rows"}
    return {"type": "blackbox", "coefficients": f"alpha {latency.alpha}, beta {latency.beta}",
            "source": (f"the reference's catalog (defaults.yaml) for {model.name} on "
                       f"{model.tp} x {model.gpu}, {model.vllm_version}"),
            "accuracy": "not measured against public data by blis-simpy (docs/accuracy.md)"}
