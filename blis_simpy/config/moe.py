"""A mixture-of-experts model's layout, read from its HuggingFace config.json in the namings
the common families use (docs/guides/moe.md has the table):

- Mixtral and Llama 4: `num_local_experts`, `num_experts_per_tok`, each expert's FFN
  `intermediate_size`; Llama 4 also a shared expert of that width and dense layers (not in
  `moe_layers` / every `interleave_moe_layer_step`-th) of `intermediate_size_mlp`;
- Qwen-MoE (Qwen1.5, 2, 3): `num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
  a shared expert of `shared_expert_intermediate_size`, dense layers in `mlp_only_layers` or
  off every `decoder_sparse_step`-th;
- DeepSeek-style: `n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
  `n_shared_experts` shared experts of that width, the first `first_k_dense_replace` layers
  dense and then every `moe_layer_freq`-th MoE.

Dense layers of a MoE model have the FFN of `intermediate_size` (Llama 4:
`intermediate_size_mlp`). A model with fewer than two experts is dense.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, get_args

EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# vLLM's MoE dispatch/combine backends (VLLM_ALL2ALL_BACKEND), as the reference's head accepts
# them; ROUTED: the all-to-all kernels that send each token to its experts' GPUs (the others
# all-gather every token to every rank).
MoeComm = Literal["naive", "allgather_reducescatter", "pplx", "deepep_high_throughput",
                  "deepep_low_latency", "mori", "flashinfer_all2allv"]
MOE_COMM: tuple[str, ...] = get_args(MoeComm)
ROUTED = frozenset({"pplx", "deepep_high_throughput", "deepep_low_latency", "mori",
                    "flashinfer_all2allv"})
DEFAULT_COMM = "allgather_reducescatter"  # vLLM's default


class MoeLayout(NamedTuple):
    """What a step's cost and the weights' size read of a mixture of experts (a NamedTuple:
    every scenario load imports it, and it is built at a tenth of a dataclass's cost)."""

    experts: int  # routed experts per MoE layer; 1 for a dense model
    per_token: int  # routed experts each token goes through
    expert_ffn: int  # one routed expert's FFN width
    shared_ffn: int  # the shared experts' FFN width together (0: none), every token, MoE layers
    moe_layers: int  # layers whose FFN is the experts (0 for a dense model)
    dense_ffn: int  # the FFN width of the other layers


def moe_layout(config: Mapping[str, Any], layers: int, intermediate: int) -> MoeLayout:
    """The layout of a (text) config with `layers` layers whose `intermediate_size` is
    `intermediate`; ValueError names a key whose value cannot be used."""
    experts = next((count(config, key) for key in EXPERT_KEYS if count(config, key)), 0)
    if experts < 2:
        return MoeLayout(1, 1, intermediate, 0, 0, intermediate)
    per_token = count(config, "num_experts_per_tok")
    if not 1 <= per_token <= experts:
        raise ValueError(f"model config key 'num_experts_per_tok' must be in 1..{experts} for "
                         f"a model with {experts} experts, got "
                         f"{config.get('num_experts_per_tok')!r}")
    expert_ffn = count(config, "moe_intermediate_size") or intermediate
    shared = count(config, "shared_expert_intermediate_size") \
        or count(config, "n_shared_experts") * expert_ffn
    dense_ffn = intermediate
    if str(config.get("model_type", "")).startswith("llama4"):
        shared = intermediate  # Llama 4's shared expert has the routed experts' width
        dense_ffn = count(config, "intermediate_size_mlp") or intermediate
    moe = sum(1 for layer in range(layers) if is_moe_layer(config, layer, layers))
    return MoeLayout(experts, per_token, expert_ffn, shared, moe, dense_ffn)


def is_moe_layer(config: Mapping[str, Any], layer: int, layers: int) -> bool:
    """Whether layer `layer` (from 0) is a MoE layer, by each family's rule."""
    listed = config.get("moe_layers")
    if isinstance(listed, list):  # Llama 4
        return layer in listed
    if "interleave_moe_layer_step" in config:  # Llama 4's default list
        step = count(config, "interleave_moe_layer_step") or 1
        return (layer + 1) % step == 0
    dense = config.get("mlp_only_layers") or []
    if not isinstance(dense, list):
        raise ValueError(f"model config key 'mlp_only_layers' must be a list of layer "
                         f"numbers, got {dense!r}")
    if layer in dense:  # Qwen-MoE
        return False
    if layer < count(config, "first_k_dense_replace"):  # DeepSeek
        return False
    if "moe_layer_freq" in config:
        return layer % (count(config, "moe_layer_freq") or 1) == 0
    step = count(config, "decoder_sparse_step") or 1  # Qwen-MoE
    return (layer + 1) % step == 0


def count(config: Mapping[str, Any], key: str) -> int:
    """A non-negative integer key (absent or null: 0)."""
    value = config.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"model config key {key!r} must be a non-negative integer, "
                         f"got {value!r}")
    return value
