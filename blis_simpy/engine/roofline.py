"""Roofline step-time model, bit-for-bit faithful to the reference Go BLIS (`sim/roofline_step.go`).

Each simulated step costs max(compute, memory) per phase (prefill, decode) plus fixed overheads.
Every floating-point expression below keeps the Go evaluation order (left to right, same
parenthesisation), because the step time is rounded to whole microseconds and a changed last bit
can flip that rounding, which would make simulated timelines diverge from the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "fp8": 1,
    "int4": 1,
    "nf4": 1,
}

# JSON key in hardware_config.json for each GpuSpec field.
_GPU_KEYS: dict[str, str] = {
    "tflops_peak": "TFlopsPeak",
    "bw_peak_tbs": "BwPeakTBs",
    "bw_eff": "BwEffConstant",
    "overhead_us": "TOverheadMicros",
    "per_layer_overhead_us": "perLayerOverhead",
    "mfu_prefill": "mfuPrefill",
    "mfu_decode": "mfuDecode",
    "allreduce_latency_us": "allReduceLatency",
}

_VECTOR_PEAK_FRACTION = 0.10  # non-tensor-core (softmax, RoPE) throughput relative to peak


def _config_int(config: dict[str, Any], key: str, required: bool) -> int:
    """Read an integer key; absent/null gives 0 unless required (Go's zero value semantics)."""
    value = config.get(key)
    if value is None:
        if required:
            raise ValueError(f"model config is missing required key {key!r}")
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"model config key {key!r} must be an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"model config key {key!r} must be an integer, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The transformer dimensions the roofline needs, as read from a HuggingFace config.json."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    bytes_per_param: int

    @classmethod
    def from_hf_config(cls, config: dict) -> ModelShape:
        """Parse config.json; multimodal configs keep the LM dims in `text_config`, which wins."""
        if not isinstance(config, dict):
            raise ValueError(f"model config must be a JSON object, got {type(config).__name__}")
        text = config.get("text_config")
        merged = {**config, **text} if isinstance(text, dict) else config
        layers = _config_int(merged, "num_hidden_layers", required=True)
        hidden = _config_int(merged, "hidden_size", required=True)
        heads = _config_int(merged, "num_attention_heads", required=True)
        kv_heads = _config_int(merged, "num_key_value_heads", required=False) or heads
        intermediate = _config_int(merged, "intermediate_size", required=False) or 4 * hidden
        dtype = merged.get("torch_dtype")
        bytes_per_param = _DTYPE_BYTES.get(dtype, 0) if isinstance(dtype, str) else 0
        if bytes_per_param == 0:
            known = ", ".join(_DTYPE_BYTES)
            raise ValueError(
                f"model config key 'torch_dtype' is {dtype!r}; expected one of {known}"
            )
        shape = cls(layers, hidden, heads, kv_heads, intermediate, bytes_per_param)
        problems = _shape_problems(shape)
        if problems:
            raise ValueError("invalid model config: " + "; ".join(problems))
        return shape


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU's entry of hardware_config.json: peaks, efficiencies and overheads (µs)."""

    tflops_peak: float
    bw_peak_tbs: float
    bw_eff: float
    overhead_us: float
    per_layer_overhead_us: float
    mfu_prefill: float
    mfu_decode: float
    allreduce_latency_us: float

    @classmethod
    def from_hardware_config(cls, config: dict, gpu: str) -> GpuSpec:
        """Pick `gpu` out of the whole hardware_config.json mapping."""
        entry = config.get(gpu) if isinstance(config, dict) else None
        if not isinstance(entry, dict):
            known = ", ".join(sorted(config)) if isinstance(config, dict) else "none"
            raise ValueError(f"unknown GPU {gpu!r} in hardware config; known GPUs: {known}")
        values: dict[str, float] = {}
        for field, key in _GPU_KEYS.items():
            value = entry.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(
                    f"hardware config for {gpu!r}: {key!r} must be a number, got {value!r}"
                )
            values[field] = float(value)
        return cls(**values)


def _bad_positive(value: float) -> bool:
    """Go's invalidPositiveFloat: the value is used as a denominator, so it must be finite > 0."""
    return not (math.isfinite(value) and value > 0)


def _shape_problems(model: ModelShape) -> list[str]:
    problems = [
        f"{name} must be > 0, got {value}"
        for name, value in (
            ("heads", model.heads),
            ("layers", model.layers),
            ("hidden", model.hidden),
        )
        if value <= 0
    ]
    if _bad_positive(model.bytes_per_param):
        problems.append(f"bytes_per_param must be a positive number, got {model.bytes_per_param}")
    return problems


def _gpu_problems(gpu: GpuSpec) -> list[str]:
    names = ("tflops_peak", "bw_peak_tbs", "bw_eff", "mfu_prefill", "mfu_decode")
    problems = [
        f"{name} must be a positive number, got {getattr(gpu, name)}"
        for name in names
        if _bad_positive(getattr(gpu, name))
    ]
    others = ("overhead_us", "per_layer_overhead_us", "allreduce_latency_us")
    problems += [
        f"{name} must be finite, got {getattr(gpu, name)}"
        for name in others
        if not math.isfinite(getattr(gpu, name))
    ]
    return problems


class RooflineModel:
    """Step time (µs) of one batch on one TP group; per-model constants are hoisted to __init__."""

    def __init__(self, model: ModelShape, gpu: GpuSpec, tp: int) -> None:
        problems = _shape_problems(model) + _gpu_problems(gpu)
        if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
            problems.append(f"tp must be a positive integer, got {tp!r}")
        if problems:
            raise ValueError("invalid roofline config: " + "; ".join(problems))
        self.model, self.gpu, self.tp = model, gpu, tp
        self._init_model_constants(model)
        self._init_gpu_constants(gpu, model, tp)

    def _init_model_constants(self, m: ModelShape) -> None:
        """Shape-only terms, each built in the same operation order as the Go expressions."""
        d, n_layers, heads = float(m.hidden), float(m.layers), float(m.heads)
        kv_heads = float(m.kv_heads) if m.kv_heads != 0 else heads
        d_ff = float(m.intermediate) if m.intermediate > 0 else 4.0 * d
        b = float(m.bytes_per_param)
        d_head = d / heads
        d_kv = kv_heads * d_head
        self._d, self._l, self._dh = d, n_layers, d_head
        self._qkv_w = d * d + 2 * d * d_kv  # qkvFlops = 2*newT*(this)
        self._mlp_w = 3 * d * d_ff  # MLP flops = 2*newT*(this)*L
        self._h4 = 4 * heads
        self._h5 = 5 * heads
        self._act = n_layers * d * b  # activation bytes per new token
        self._kv_tok = 2 * n_layers * kv_heads * d_head * b  # KV bytes per token (read or write)
        self._weights = (d * (d + 2 * d_kv) + (d * d) + (3 * d * d_ff)) * n_layers * b
        # Decode (newT = 1) terms that do not depend on the context length.
        self._dec_proj = (2 * self._qkv_w + 2 * d * d) * n_layers
        self._dec_mlp = 2 * self._mlp_w * n_layers
        self._dec_rope = 2 * d

    def _init_gpu_constants(self, g: GpuSpec, m: ModelShape, tp: int) -> None:
        peak = g.tflops_peak * 1e12
        self._tpf = float(tp)
        self._flops_prefill = peak * g.mfu_prefill
        self._flops_decode = peak * g.mfu_decode
        self._vector_peak = peak * _VECTOR_PEAK_FRACTION
        self._eff_bw = g.bw_peak_tbs * 1e12 * g.bw_eff
        self._weights_tp = self._weights / self._tpf
        n_layers = float(m.layers)
        self._layer_floor_us = (n_layers * g.per_layer_overhead_us) / 1e6 * 1e6
        comm_s = (n_layers * 2 * g.allreduce_latency_us) / 1e6 if tp > 1 else 0.0
        self._comm_us = comm_s * 1e6
        self._overhead_us = g.overhead_us

    def step_time(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> int:
        """Whole microseconds for one step.

        prefills: (tokens already processed, new tokens this step); decodes: tokens processed.
        """
        # An empty phase contributes exactly 0.0, as Go's max(0, 0) does.
        hardware_s = 0.0
        if prefills:
            hardware_s = self._phase_s(self._prefill_sums(prefills), self._flops_prefill)
        if decodes:
            hardware_s += self._phase_s(self._decode_sums(decodes), self._flops_decode)
        total_us = hardware_s * 1e6 + self._layer_floor_us + self._comm_us + self._overhead_us
        return math.floor(total_us + 0.5)

    def _phase_s(self, sums: tuple[float, float, float], mfu_flops: float) -> float:
        """Roofline bound of one phase; the weights are streamed once per phase, not per request."""
        gemm_sum, vec_sum, dyn_sum = sums
        compute_s = gemm_sum / mfu_flops + vec_sum / self._vector_peak
        memory_s = (self._weights_tp + dyn_sum) / self._eff_bw
        return max(compute_s, memory_s)

    def _prefill_sums(self, prefills: Sequence[tuple[int, int]]) -> tuple[float, float, float]:
        """Per-GPU (GEMM flops, vector flops, non-weight bytes) summed over (s, n) requests."""
        d, n_layers, d_head, tpf = self._d, self._l, self._dh, self._tpf
        qkv_w, mlp_w, h4, h5 = self._qkv_w, self._mlp_w, self._h4, self._h5
        act, kv_tok, weights = self._act, self._kv_tok, self._weights
        gemm_sum = vec_sum = dyn_sum = 0.0
        for progress, num_new in prefills:
            seq, new_t = float(progress), float(num_new)
            ctx = seq + (new_t - 1) / 2.0 if new_t > 1 else seq
            gemm = (2 * new_t * qkv_w + 2 * new_t * d * d) * n_layers
            gemm += h4 * new_t * ctx * d_head * n_layers
            gemm += 2 * new_t * mlp_w * n_layers
            vec = (h5 * new_t * ctx + 2 * new_t * d) * n_layers
            total = act * new_t + kv_tok * seq + kv_tok * new_t + weights
            gemm_sum += gemm / tpf
            vec_sum += vec / tpf
            dyn_sum += (total - weights) / tpf
        return gemm_sum, vec_sum, dyn_sum

    def _decode_sums(self, decodes: Sequence[int]) -> tuple[float, float, float]:
        """Same sums for decodes (n = 1), with the n factors folded into constants exactly."""
        n_layers, d_head, tpf = self._l, self._dh, self._tpf
        proj, mlp, rope, h4, h5 = self._dec_proj, self._dec_mlp, self._dec_rope, self._h4, self._h5
        act, kv_tok, weights = self._act, self._kv_tok, self._weights
        gemm_sum = vec_sum = dyn_sum = 0.0
        # Plain loop, not sum(): Python 3.12+ sum() of floats is compensated (not Go's order).
        for seq in decodes:  # int * float promotes exactly; no float() call in the hot loop
            gemm_sum += (proj + h4 * seq * d_head * n_layers + mlp) / tpf
            vec_sum += (h5 * seq + rope) * n_layers / tpf
            dyn_sum += (act + kv_tok * seq + kv_tok + weights - weights) / tpf
        return gemm_sum, vec_sum, dyn_sum
