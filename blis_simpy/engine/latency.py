"""Step-time models: how long one engine step takes, and the per-request fixed delays.

Both models share the reference's alpha side: a queueing delay a0 + a1*input_len from arrival to
the wait queue, and an output-processing delay a2 added to every token's emission time (it never
holds the engine). Go's int64() conversion truncates toward zero, so does int().
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from blis_simpy.config import hardware as gpus
from blis_simpy.config import step_models
from blis_simpy.config.catalog import (
    bundled_hardware_config,
    bundled_model_config,
    read_json,
)
from blis_simpy.config.moe import DEFAULT_COMM, ROUTED
from blis_simpy.config.scenario import ModelConfig, Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.engine.alpha import Alpha, batch_shape
from blis_simpy.engine.physical import Clock, PhysicalLatency, StepShape
from blis_simpy.engine.roofline import GpuSpec, ModelShape, RooflineModel
from blis_simpy.engine.roofline_native import (
    NativeRoofline,
    NativeShape,
    unmodelled_fields,
)


class LatencyModel(Protocol):
    output_delay: int
    per_request: bool  # does step_time read the batch (not only its token counts)?

    def queue_delay(self, input_len: int) -> int: ...

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        """Duration (µs) of a step with `new_tokens` uncached prefill tokens and `decodes`
        decode requests; `batch` is the scheduled requests (progress not yet applied);
        `extra_us` is time the step spends on top of its compute (KV loads from a lower tier,
        a warm-up penalty), added as is."""
        ...


class BulkLatency(LatencyModel, Protocol):
    """A model whose step time reads the batch only through sums over its requests (the
    physical model: tokens, KV entries read, attention pairs, requests, tokens streamed), so
    the steady path's implicit decoders can be given in bulk (engine/steady.py) instead of
    one by one; such a model says so with `bulk = True`."""

    def bulk_step_time(self, batch: Sequence[Request], decoders: int, context: int,
                       extra_us: int) -> int:
        """`step_time` of `batch` plus `decoders` more requests decoding one token each,
        whose progress sums to `context`."""
        ...


class Scaled:
    """Another model's step times times `factor()`, read at each step's start (a warming
    replica's penalty, a slowed instance); its delays as they are."""

    def __init__(self, base: LatencyModel, factor: Callable[[], float]) -> None:
        self.base = base
        self.factor = factor
        self.output_delay = base.output_delay
        self.per_request = base.per_request
        self.bulk: bool = getattr(base, "bulk", False)
        self.mixes_prefill: bool = getattr(base, "mixes_prefill", True)

    def queue_delay(self, input_len: int) -> int:
        return self.base.queue_delay(input_len)

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        return round(self.base.step_time(new_tokens, decodes, batch, extra_us) * self.factor())

    def bulk_step_time(self, batch: Sequence[Request], decoders: int, context: int,
                       extra_us: int) -> int:
        base: BulkLatency = self.base  # type: ignore[assignment]  # (only when `bulk`)
        return round(base.bulk_step_time(batch, decoders, context, extra_us) * self.factor())


class BlackboxLatency(Alpha):
    """Fitted regression: step = b0 + b1*new prefill tokens (cache misses) + b2*decodes."""

    per_request = False

    def __init__(self, alpha: Sequence[float], beta: Sequence[float]) -> None:
        super().__init__(alpha)
        self.b0, self.b1, self.b2 = float(beta[0]), float(beta[1]), float(beta[2])

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        return int(self.b0 + self.b1 * new_tokens + self.b2 * decodes) + extra_us


class RooflineLatency(Alpha):
    """Analytic step time from model shape and GPU figures (see roofline.py)."""

    per_request = True

    def __init__(self, alpha: Sequence[float], model: RooflineModel) -> None:
        super().__init__(alpha)
        self.model = model

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        return self.model.step_time(*batch_shape(batch)) + extra_us


class NativeRooflineLatency(Alpha):
    """The native mode's roofline: one fused step (see roofline_native.py)."""

    per_request = True

    def __init__(self, alpha: Sequence[float], model: NativeRoofline, notes: list[str]) -> None:
        super().__init__(alpha)
        self.model = model
        self.notes = notes

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        requests = [(req.progress, -req.chunk if req.chunk < 0 else req.chunk)
                    for req in batch]  # a decode verifies 1 (+ drafted) positions
        return self.model.step_time(requests) + extra_us


def latency_model(scenario: Scenario) -> LatencyModel:
    """The step-time model of a resolved scenario."""
    latency = scenario.latency
    if latency.type != "physical":
        refuse_parallel(scenario.model, latency.type or "blackbox")
    alpha = latency.alpha or [0.0, 0.0, 0.0]  # roofline's default; blackbox is resolved
    if latency.type == "physical":
        return physical_latency(scenario)
    if latency.type == "blackbox":
        if latency.beta is None:
            raise ScenarioError("latency.beta", "is needed by the blackbox model (resolve() "
                                "fills it from the catalog)")
        return BlackboxLatency(alpha, latency.beta)
    if scenario.compat == "blis":
        return RooflineLatency(alpha, roofline(scenario))
    return native_roofline(alpha, scenario)


def refuse_parallel(model: ModelConfig, kind: str) -> None:
    """Only the physical model costs data/expert parallelism and MoE dispatch."""
    for key, used in (("dp", model.dp > 1), ("expert_parallel", model.expert_parallel),
                      ("moe_comm", model.moe_comm is not None)):
        if used:
            raise ScenarioError(f"model.{key}", f"is costed by the physical step model only; "
                                f"the {kind} model would ignore it", "latency.type: physical")


def bound(latency: LatencyModel, clock: Clock) -> LatencyModel:
    """The model one instance uses: a physical model gets its own API server on the
    simulation's clock; the others hold no state and are shared."""
    return latency.bind(clock) if isinstance(latency, PhysicalLatency) else latency


def latency_notes(latency: LatencyModel) -> list[str]:
    """What the step-time model ignores of its inputs (config fields that would change the
    cost), reported with the run's warnings."""
    if isinstance(latency, NativeRooflineLatency | PhysicalLatency):
        return latency.notes
    return []


def roofline(scenario: Scenario) -> RooflineModel:
    latency, model = scenario.latency, scenario.model
    try:
        shape = ModelShape.from_hf_config(model_config(scenario))
    except ValueError as exc:
        raise ScenarioError("latency.model_config", str(exc)) from None
    try:
        hardware = (read_json(latency.hardware_config, None) if latency.hardware_config
                    else bundled_hardware_config())
        if model.gpu is None:
            raise ValueError("the roofline model needs model.gpu")
        gpu = GpuSpec.from_hardware_config(hardware, model.gpu)
        return RooflineModel(shape, gpu, model.tp or 0)
    except ValueError as exc:
        raise ScenarioError("latency.hardware_config", str(exc)) from None


def native_roofline(alpha: Sequence[float], scenario: Scenario) -> NativeRooflineLatency:
    """The corrected roofline of native mode; the run warns about config fields it ignores."""
    shape, config, gpu, tp = native_inputs(scenario)
    return NativeRooflineLatency(alpha, NativeRoofline(shape, gpu, tp), unmodelled_fields(config))


def physical_latency(scenario: Scenario) -> PhysicalLatency:
    """The physical step model with its coefficient set; the run warns about config fields it
    ignores."""
    shape, config, gpu, tp = native_inputs(scenario)
    try:
        coefficients = step_models.load(scenario.latency.coefficients)
    except ValueError as exc:
        raise ScenarioError("latency.coefficients", str(exc)) from None
    name = gpu_name(scenario)
    spec = scenario.model
    comm = spec.moe_comm or DEFAULT_COMM
    check_parallel(spec, shape)
    model = PhysicalLatency(StepShape(shape, gpu, tp, spec.dp, spec.expert_parallel, comm),
                            coefficients.for_gpu(name))
    model.mixes_prefill = coefficients.mixes_prefill
    limit = scenario.latency.graph_max_batch
    if limit is None:
        limit = coefficients.graph_max_batch
    if limit is not None:
        model.shape.graph_max_batch = limit
    model.notes = unmodelled_fields(config) + parallel_notes(spec)
    return model


def check_parallel(model: ModelConfig, shape: NativeShape) -> None:
    """Data and expert parallelism need a mixture of experts, as in vLLM: it refuses expert
    parallelism for a dense model, and a dense model's data-parallel ranks are independent
    engines, which are instances here."""
    if shape.experts > 1:
        return
    if model.dp > 1:
        raise ScenarioError("model.dp", f"{model.dp} ranks inside one instance are for a "
                            f"mixture of experts; {model.name} is dense, and vLLM runs a dense "
                            "model's data-parallel ranks as independent engines: give "
                            "cluster.instances (routing scorer vllm-dp for vLLM's balancer)",
                            "1")
    if model.expert_parallel:
        raise ScenarioError("model.expert_parallel", f"{model.name} is dense (its config has "
                            "no num_local_experts); vLLM refuses expert parallelism for it",
                            "false")


def parallel_notes(model: ModelConfig) -> list[str]:
    """A dispatch backend the run cannot use, reported with its warnings."""
    comm = model.moe_comm
    if comm is None or (model.dp > 1 and (model.expert_parallel or comm not in ROUTED)):
        return []
    if model.dp == 1:
        return [f"model.moe_comm {comm} has no effect at dp 1: the MoE layers all-reduce over "
                "tensor parallelism (dispatch and combine run between data-parallel ranks)"]
    return [f"model.moe_comm {comm} is an all-to-all kernel vLLM runs under expert parallelism "
            "only; without model.expert_parallel the dispatch all-gathers (costed as "
            "allgather_reducescatter)"]


def gpu_name(scenario: Scenario) -> str:
    """The scenario's GPU by its name in the hardware file (an alias resolved)."""
    gpu = scenario.model.gpu or ""
    try:
        config = gpus.hardware(scenario.latency.hardware_config)
    except ValueError:
        return gpu
    return gpus.names(config).get(gpu.casefold(), gpu)


def native_inputs(scenario: Scenario) -> tuple[NativeShape, dict, gpus.GpuSpec, int]:
    """What the native models read: the model's shape and config, the GPU's figures (native
    format) and the tensor parallelism, each error naming its scenario key."""
    latency, model = scenario.latency, scenario.model
    try:
        config = model_config(scenario)
        shape = NativeShape.from_hf_config(config)
    except ValueError as exc:
        raise ScenarioError("latency.model_config", str(exc)) from None
    tp = model.tp or 1
    check_tp(shape.heads, shape.kv_heads, tp)
    try:
        if model.gpu is None:
            raise ValueError("the native step models need model.gpu")
        gpu = gpus.gpu_spec(gpus.hardware(latency.hardware_config), model.gpu)
    except ValueError as exc:  # the file, or the GPU it does not list: name the key too
        raise ScenarioError("latency.hardware_config", f"{exc} (model.gpu "
                            f"{model.gpu!r})") from None
    return shape, config, gpu, tp


def splits(heads: int, kv_heads: int, tp: int) -> bool:
    """vLLM's rule: the attention heads divide over the GPUs, and the KV heads either divide
    over them or are replicated a whole number of times."""
    return heads % tp == 0 and (kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0)


def check_tp(heads: int, kv_heads: int, tp: int) -> None:
    if not splits(heads, kv_heads, tp):
        valid = [n for n in range(1, heads + 1) if splits(heads, kv_heads, n)]
        raise ScenarioError("model.tp", f"{tp} GPUs cannot split the model's {heads} attention "
                            f"heads ({kv_heads} KV heads); vLLM refuses it",
                            ", ".join(map(str, valid)))


def model_config(scenario: Scenario) -> dict:
    """The model's config.json: the scenario's file, else the bundled one."""
    path = scenario.latency.model_config
    return read_json(path, "config.json") if path else bundled_model_config(scenario.model.name)
