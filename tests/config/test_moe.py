"""Issue 35 item 4: a mixture of experts' layout read in the Mixtral, Qwen-MoE, DeepSeek and
Llama 4 namings (config/moe.py), by the step models and the weights' size alike."""

from __future__ import annotations

import pytest

from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.memory import model_weight_bytes
from blis_simpy.config.moe import MoeLayout, moe_layout
from blis_simpy.engine.roofline_native import NativeShape

BASE = {"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 24,
        "intermediate_size": 5632, "vocab_size": 151936, "torch_dtype": "bfloat16"}


def test_item4_mixtral_naming():
    config = bundled_model_config("mistralai/Mixtral-8x7B-v0.1")
    assert moe_layout(config, 32, 14336) == MoeLayout(8, 2, 14336, 0, 32, 14336)


def test_item4_qwen_moe_naming_with_a_shared_expert():
    """Qwen1.5-MoE-A2.7B: 60 experts of 1408, 4 per token, a shared expert of 5632."""
    config = {**BASE, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
              "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1,
              "mlp_only_layers": []}
    assert moe_layout(config, 24, 5632) == MoeLayout(60, 4, 1408, 5632, 24, 5632)
    sparse = {**config, "decoder_sparse_step": 2, "mlp_only_layers": [1]}
    assert moe_layout(sparse, 24, 5632).moe_layers == 11  # layers 1, 3, ..., 23 less layer 1


def test_item4_qwen3_moe_is_bundled_and_weighs_30b_parameters():
    config = bundled_model_config("Qwen/Qwen3-30B-A3B")
    shape = NativeShape.from_hf_config(config)
    assert (shape.experts, shape.experts_per_token, shape.intermediate, shape.moe_layers,
            shape.shared_intermediate) == (128, 8, 768, 48, 0)
    weights = model_weight_bytes(config)
    assert weights is not None
    assert weights / 2 == pytest.approx(30.5e9, rel=0.01)  # its published 30.5B parameters


def test_item4_deepseek_naming_dense_prefix_and_shared_experts():
    """DeepSeek-V2-Lite's MoE keys: 64 routed experts of 1408, 6 per token, 2 shared, the
    first layer dense (its MLP 10944)."""
    config = {**BASE, "num_hidden_layers": 27, "intermediate_size": 10944,
              "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
              "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "moe_layer_freq": 1}
    assert moe_layout(config, 27, 10944) == MoeLayout(64, 6, 1408, 2 * 1408, 26, 10944)
    shape = NativeShape.from_hf_config(config)
    assert shape.moe_layers == 26 and shape.dense_intermediate == 10944


def test_item4_llama4_interleaved_layers_and_shared_expert():
    config = {**BASE, "model_type": "llama4_text", "num_local_experts": 128,
              "num_experts_per_tok": 1, "intermediate_size": 8192,
              "intermediate_size_mlp": 16384, "interleave_moe_layer_step": 2}
    assert moe_layout(config, 48, 8192) == MoeLayout(128, 1, 8192, 8192, 24, 16384)
    assert moe_layout({**config, "interleave_moe_layer_step": 1}, 48, 8192).moe_layers == 48


def test_item4_a_dense_model_has_no_layout_of_experts():
    assert moe_layout(BASE, 24, 5632) == MoeLayout(1, 1, 5632, 0, 0, 5632)
    assert moe_layout({**BASE, "num_experts": 0}, 24, 5632).experts == 1


@pytest.mark.parametrize(("key", "value"), [("num_experts", -1), ("num_experts", "many"),
                                            ("num_experts_per_tok", 0),
                                            ("mlp_only_layers", "1,2"),
                                            ("first_k_dense_replace", 1.5)])
def test_item4_unusable_moe_keys_are_errors_naming_them(key, value):
    config = {**BASE, "num_experts": 8, "num_experts_per_tok": 2, key: value}
    with pytest.raises(ValueError, match=key):
        moe_layout(config, 24, 5632)


def test_item4_dense_step_cost_is_the_same_with_or_without_moe_keys_at_zero():
    plain = NativeShape.from_hf_config(bundled_model_config("qwen/qwen2.5-7b-instruct"))
    zeroed = NativeShape.from_hf_config({**bundled_model_config("qwen/qwen2.5-7b-instruct"),
                                         "num_experts": 0})
    assert plain == zeroed
