"""Native roofline step-time model: one fused vLLM step, from the model shape and GPU figures.

The reference's roofline (roofline.py, kept bit for bit for compat) costs prefill and decode as
two phases that each stream the weights, bounds decode by an assumed 12 % MFU, and reads MoE
models as dense. A vLLM step is one forward pass over every scheduled token, so here:

- linear layers: the weights are read once per step; the tokens' GEMM FLOPs are compared with
  those bytes (a roofline of the weight-bound kernels);
- attention: each request reads its own KV cache (context length x KV bytes per token) and does
  FLOPs by its context (a roofline of the attention kernels); the two rooflines are added because
  the kernels run one after the other;
- mixture of experts: FLOPs from the `num_experts_per_tok` active experts, bytes from the experts
  the step's tokens touch: E * (1 - (1 - k/E) ** tokens) per layer under uniform routing;
- tensor parallelism: weights, KV heads and FLOPs are split over the GPUs; every layer adds two
  all-reduces of the step's hidden states over NVLink (ring: 2 (tp-1)/tp of the bytes each way);
- a fixed per-step overhead (scheduling, sampling, launch).

The GPU figures live in data/hardware_native.json (config/hardware.py); where each number
comes from is in docs/roofline.md. MoE layouts are read in the common namings (config/moe.py),
latent attention too (config/attention.py); config fields the model does not read but that
change the cost are reported: quantization and sliding windows are warnings (the cost is an
upper bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_simpy.config.attention import LatentAttention, latent_attention
from blis_simpy.config.hardware import GpuSpec
from blis_simpy.config.moe import moe_layout
from blis_simpy.engine.roofline import ModelShape


@dataclass(frozen=True, slots=True)
class NativeShape:
    """What the native roofline reads from a HuggingFace config.json."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # per expert for MoE models
    vocab: int
    bytes_per_param: int
    experts: int  # 1 for a dense model
    experts_per_token: int
    moe_layers: int = 0  # layers whose FFN is the experts; the others are dense
    shared_intermediate: int = 0  # the shared experts' FFN width (each MoE layer, every token)
    dense_intermediate: int = 0  # the dense layers' FFN width in a MoE model
    latent: LatentAttention | None = None  # multi-head latent attention (config/attention.py)

    @classmethod
    def from_hf_config(cls, config: dict) -> NativeShape:
        """The reference's dimensions plus head_dim, vocabulary and the MoE layout in the
        Mixtral, Qwen-MoE and DeepSeek namings (config/moe.py); ValueError names a field it
        cannot cost."""
        base = ModelShape.from_hf_config(config)
        merged = _text_config(config)
        moe = moe_layout(merged, base.layers, base.intermediate)
        latent = latent_attention(merged)
        head_dim = _positive_int(merged, "head_dim", base.hidden // base.heads)
        if moe.experts == 1:
            return cls(base.layers, base.hidden, base.heads, base.kv_heads, head_dim,
                       base.intermediate, _positive_int(merged, "vocab_size", 0),
                       base.bytes_per_param, 1, 1, latent=latent)
        return cls(base.layers, base.hidden, base.heads, base.kv_heads, head_dim,
                   moe.expert_ffn, _positive_int(merged, "vocab_size", 0),
                   base.bytes_per_param, moe.experts, moe.per_token, moe.moe_layers,
                   moe.shared_ffn, moe.dense_ffn, latent)

    def attention_params(self) -> int:
        """One layer's attention parameters: Q, K, V and output projections, or the latent
        attention's."""
        if self.latent is not None:
            return self.latent.params(self.hidden, self.heads)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.hidden * (q_width + 2 * kv_width) + q_width * self.hidden

    def other_mlp_params(self) -> int:
        """A MoE model's FFN parameters besides the routed experts: the router and shared
        experts of its MoE layers, the MLP of its dense layers (0 for a dense model)."""
        if self.experts == 1:
            return 0
        return (self.moe_layers * self.hidden * (self.experts + 3 * self.shared_intermediate)
                + (self.layers - self.moe_layers) * 3 * self.hidden * self.dense_intermediate)


def _text_config(config: dict) -> dict:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _positive_int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model config key {key!r} must be a positive integer, got {value!r}")
    return value


def unmodelled_fields(config: dict) -> list[str]:
    """Warnings for config fields that change the cost but that the model does not apply."""
    merged = _text_config(config)
    notes = []
    quant = merged.get("quantization_config")
    if quant:
        method = quant.get("quant_method", "?") if isinstance(quant, dict) else "?"
        notes.append(
            f"model config: quantization_config ({method}) is not modelled by the native "
            f"roofline; weights are costed at torch_dtype {merged.get('torch_dtype')}, so "
            "memory-bound steps come out slower than a quantized model runs")
    window = merged.get("sliding_window")
    longest = merged.get("max_position_embeddings")
    if (isinstance(window, int) and merged.get("use_sliding_window", True) is not False
            and not (isinstance(longest, int) and window >= longest)):
        notes.append(
            f"model config: sliding_window {window} is not modelled by the native roofline; "
            "attention is costed over the whole context, so long contexts come out slower")
    return notes


@dataclass(frozen=True, slots=True)
class StepCost:
    """One step's seconds by term, per GPU (the step time is their sum plus the overhead)."""

    linear_s: float
    attention_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.linear_s + self.attention_s + self.comm_s + self.overhead_s


class NativeRoofline:
    """Step time of one fused batch on one tensor-parallel group."""

    def __init__(self, shape: NativeShape, gpu: GpuSpec, tp: int) -> None:
        if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
            raise ValueError(f"tp must be a positive integer, got {tp!r}")
        self.shape, self.gpu, self.tp = shape, gpu, tp
        m, b = shape, float(shape.bytes_per_param)
        q_width = m.heads * m.head_dim
        attn_params = m.attention_params()
        self._expert_params = 3 * m.hidden * m.intermediate  # gated MLP: gate, up, down
        self._lm_head_params = m.vocab * m.hidden
        # Parameters every token multiplies through (per layer), and those read whatever the batch.
        if m.experts > 1:  # routers, shared experts and dense layers besides the experts
            other = m.layers * attn_params + m.other_mlp_params()
            self._active_params = other + m.moe_layers * m.experts_per_token * self._expert_params
            self._fixed_bytes = (other + self._lm_head_params) * b
            self._expert_bytes = m.moe_layers * self._expert_params * b
        else:
            self._active_params = m.layers * (attn_params + self._expert_params)
            self._fixed_bytes = (m.layers * attn_params + self._lm_head_params) * b
            self._expert_bytes = m.layers * self._expert_params * b
        self._attn_flops = 4.0 * q_width * m.layers  # QK^T and AV per (token, context token)
        kv_heads_per_gpu = math.ceil(m.kv_heads / tp)  # heads are replicated when tp > kv_heads
        self._kv_bytes_per_token = 2.0 * m.layers * kv_heads_per_gpu * m.head_dim * b
        if m.latent is not None:  # the whole latent on every GPU; absorbed attention
            self._attn_flops = float(m.latent.flops_per_pair(m.heads) * m.layers)
            self._kv_bytes_per_token = float(m.layers * m.latent.cached) * b
        self._flops = gpu.tflops_peak * 1e12 * gpu.mfu
        self._bandwidth = gpu.hbm_tbs * 1e12 * gpu.hbm_efficiency
        self._link = gpu.link_bytes_per_s
        self._hidden_bytes = m.hidden * b

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per layer that `tokens` tokens route to (uniform routing)."""
        m = self.shape
        if m.experts == 1:
            return 1.0
        return m.experts * (1.0 - (1.0 - m.experts_per_token / m.experts) ** tokens)

    def cost(self, tokens: int, requests: int, attended: float, kv_tokens: int) -> StepCost:
        """Seconds per term for a step of `tokens` new tokens over `requests` requests, where
        `attended` sums new tokens x mean context they attend to, and `kv_tokens` sums the KV
        entries read or written (context + new tokens) over the requests."""
        tp = self.tp
        gemm_flops = 2.0 * (tokens * self._active_params + requests * self._lm_head_params) / tp
        weight_bytes = (self._fixed_bytes
                        + self.experts_touched(tokens) * self._expert_bytes) / tp
        linear = max(gemm_flops / self._flops, weight_bytes / self._bandwidth)
        attention = max(attended * self._attn_flops / tp / self._flops,
                        kv_tokens * self._kv_bytes_per_token / self._bandwidth)
        comm = 0.0
        if tp > 1:
            ring_bytes = 2.0 * (tp - 1) / tp * tokens * self._hidden_bytes
            per_allreduce = self.gpu.allreduce_latency_us / 1e6 + ring_bytes / self._link
            comm = 2 * self.shape.layers * per_allreduce
        return StepCost(linear, attention, comm, self.gpu.step_overhead_us / 1e6)

    def step_time(self, requests: list[tuple[int, int]]) -> int:
        """Whole microseconds for a step over (tokens already in the KV cache, new tokens)."""
        tokens = attended = kv_tokens = 0.0
        for context, new in requests:
            tokens += new
            attended += new * (context + (new + 1) / 2)
            kv_tokens += context + new
        cost = self.cost(int(tokens), len(requests), attended, int(kv_tokens))
        return round(cost.total_s * 1e6)
