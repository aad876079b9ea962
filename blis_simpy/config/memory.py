"""A roofline run's KV cache sized from the GPU's memory, as vLLM sizes it at start-up.

vLLM gives the KV cache what is left of `gpu_memory_utilization` (default 0.9) of each GPU's
memory once the weights are loaded, and cuts it into blocks; the catalog's `total_kv_blocks`
are that figure as measured. A roofline scenario has no catalog row, so the same arithmetic
is done from the model's config.json (docs/performance.md, "KV cache size"):

    kv_blocks = (tp x GPU memory x utilisation - weight bytes) / bytes per block
    bytes per block = 2 (K and V) x layers x kv_heads x head_dim x dtype bytes x block_size

For Llama-3.1-8B on one H100 this gives 29,043 blocks of 16 tokens; the catalog's measured
figure is 29,205 (activations and CUDA graphs, which this leaves out, cost vLLM a little,
its allocator's rounding gives a little back).
"""

from __future__ import annotations

from typing import Any

from blis_simpy.config import hardware as gpus
from blis_simpy.config.attention import LatentAttention, latent_attention
from blis_simpy.config.moe import MoeLayout, moe_layout

# vLLM's default `gpu_memory_utilization`: the share of each GPU's memory it claims.
GPU_MEMORY_UTILIZATION = 0.9
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "fp8": 1}
MIB = 1 << 20


def positive_int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def weight_bytes(config: dict[str, Any], dtype_bytes: int) -> int | None:
    """The parameters of a decoder (attention, gated MLP of every expert and the router of a
    mixture of experts, embeddings; norms are negligible) times their size; None when
    config.json lacks a dimension."""
    layers, hidden = positive_int(config, "num_hidden_layers"), positive_int(config, "hidden_size")
    heads, vocab = positive_int(config, "num_attention_heads"), positive_int(config, "vocab_size")
    if not (layers and hidden and heads and vocab):
        return None
    kv_heads = positive_int(config, "num_key_value_heads") or heads
    head_dim = positive_int(config, "head_dim") or hidden // heads
    intermediate = positive_int(config, "intermediate_size") or 4 * hidden
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o; k, v
    latent = latent_or_none(config)
    if latent is not None:
        attention = latent.params(hidden, heads)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    moe = layout(config)
    if moe is None or moe.experts == 1:
        return (layers * (attention + 3 * hidden * intermediate) + embeddings) * dtype_bytes
    mlp = (moe.moe_layers * hidden * (3 * moe.expert_ffn * moe.experts + moe.experts
                                      + 3 * moe.shared_ffn)
           + (layers - moe.moe_layers) * 3 * hidden * moe.dense_ffn)
    return (layers * attention + mlp + embeddings) * dtype_bytes


def latent_or_none(config: dict[str, Any]) -> LatentAttention | None:
    """The model's latent attention (config/attention.py); None for per-head keys and values
    or keys that cannot be read (the step model reports which)."""
    try:
        return latent_attention(config)
    except ValueError:
        return None


def layout(config: dict[str, Any]) -> MoeLayout | None:
    """The model's MoE layout (config/moe.py); None when its keys cannot be read (the step
    model reports which)."""
    layers, hidden = positive_int(config, "num_hidden_layers"), positive_int(config, "hidden_size")
    try:
        return moe_layout(config, layers or 0,
                          positive_int(config, "intermediate_size") or 4 * (hidden or 0))
    except ValueError:
        return None


def expert_weight_bytes(config: dict[str, Any], dtype_bytes: int) -> int:
    """The routed experts' share of `weight_bytes` (0 for a dense model)."""
    moe = layout(config)
    if moe is None or moe.experts == 1:
        return 0
    hidden = positive_int(config, "hidden_size") or 0
    return moe.moe_layers * 3 * hidden * moe.expert_ffn * moe.experts * dtype_bytes


def memory_kv_blocks(model_config: dict[str, Any], gpu: str, tp: int, block_size: int,
                     hardware: dict[str, Any] | None = None, dp: int = 1) -> int | None:
    """The KV blocks that fit beside the weights on `tp` GPUs of this kind (its memory from
    `hardware`, a native hardware config, else the bundled one); None when the GPU's memory
    or a model dimension is unknown (the caller keeps its default), 0 when the weights leave
    no room for one block (the model does not fit: vLLM would not start). With `dp` data-
    parallel ranks of a mixture of experts, each rank holds its own attention and embeddings
    but only 1/dp of the experts (sliced or whole, they are spread over all tp x dp GPUs),
    and its own KV cache: the blocks are dp times a rank's."""
    memory_mib = gpu_memory_mib(gpu, hardware)
    config = text_config(model_config)
    dtype_bytes = dtype_size(config)
    weights = rank_weight_bytes(model_config, dp)
    if memory_mib is None or dtype_bytes is None:
        return None
    layers, hidden = positive_int(config, "num_hidden_layers"), positive_int(config, "hidden_size")
    heads = positive_int(config, "num_attention_heads")
    if weights is None or not (layers and hidden and heads):
        return None
    kv_heads = positive_int(config, "num_key_value_heads") or heads
    head_dim = positive_int(config, "head_dim") or hidden // heads
    block_bytes = 2 * layers * kv_heads * head_dim * dtype_bytes * block_size
    latent = latent_or_none(config)
    if latent is not None:  # the whole latent on every GPU of the group
        block_bytes = tp * layers * latent.cached * dtype_bytes * block_size
    free = int(tp * memory_mib * MIB * GPU_MEMORY_UTILIZATION) - weights
    return dp * (free // block_bytes) if free >= block_bytes else 0


def text_config(model_config: dict[str, Any]) -> dict[str, Any]:
    """A multimodal config's text part merged over it (the decoder's dimensions)."""
    text = model_config.get("text_config")
    return {**model_config, **text} if isinstance(text, dict) else model_config


def dtype_size(config: dict[str, Any]) -> int | None:
    dtype = config.get("torch_dtype")
    return DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None


def model_weight_bytes(model_config: dict[str, Any]) -> int | None:
    """The whole model's weight bytes at its torch_dtype; None when a figure is missing."""
    config = text_config(model_config)
    size = dtype_size(config)
    return None if size is None else weight_bytes(config, size)


def rank_weight_bytes(model_config: dict[str, Any], dp: int = 1) -> int | None:
    """The weights one of `dp` data-parallel ranks holds: all but the routed experts, and
    1/dp of those (sliced or whole, they are spread over every rank's GPUs)."""
    weights = model_weight_bytes(model_config)
    size = dtype_size(text_config(model_config))
    if dp == 1 or weights is None or size is None:
        return weights
    return weights - expert_weight_bytes(text_config(model_config), size) * (dp - 1) // dp


def gpu_memory_mib(gpu: str, hardware: dict[str, Any] | None = None) -> float | None:
    """A GPU's memory as the driver reports it (MiB), None when the GPU is unknown."""
    try:
        return gpus.gpu_spec(gpus.bundled() if hardware is None else hardware, gpu).memory_mib
    except ValueError:
        return None
