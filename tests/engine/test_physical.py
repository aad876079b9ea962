"""The physical step-time model's terms, checked against hand-computed figures."""

from __future__ import annotations

import pytest

from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.engine.physical import Physics

H100_TFLOPS, H100_TBS = 989.5, 3.35


def physics(model: str, tp: int) -> Physics:
    return Physics.of(bundled_model_config(model), H100_TFLOPS, H100_TBS, tp)


def test_dense_decode_reads_the_weights_once_and_kv_by_context():
    p = physics("meta-llama/Llama-2-7b-hf", 1)
    one, many = p.features([], [100]), p.features([], [100] * 64)
    # Llama-2-7B: 6.74e9 parameters, of which the input embedding (32000 x 4096 = 0.13e9) is
    # not read in full: attention 2.15e9 + MLP 4.33e9 + LM head 0.13e9, fp16.
    assert one[1] == pytest.approx(6.607e9 * 2 / 3.35e6, rel=0.001)
    assert many[1] == one[1]  # a bigger batch reads the same weights
    kv_per_token = 2 * 32 * 32 * 128 * 2  # K and V, 32 layers, 32 heads x 128, fp16
    assert many[3] == pytest.approx(64 * 100 * kv_per_token / 3.35e6)
    assert many[2] == pytest.approx(64 * one[2])  # FLOPs per decode token
    assert (many[4], many[5]) == (64.0, 0.0)  # requests; no all-reduce at TP 1


def test_mixture_of_experts_reads_the_experts_its_tokens_touch():
    p = physics("mistralai/Mixtral-8x7B-v0.1", 2)
    expert_bytes = 32 * 3 * 4096 * 14336 * 2  # one expert's MLP over 32 layers, bf16
    one, batch = p.features([], [500]), p.features([], [500] * 32)
    touched = 8 * (1 - (1 - 2 / 8) ** 32)
    assert batch[1] - one[1] == pytest.approx((touched - 2) * expert_bytes / (2 * 3.35e6))
    assert batch[5] == 2 * 32  # two all-reduces per layer at TP 2


def test_prefill_cost_grows_with_the_chunk_and_its_cached_prefix():
    p = physics("codellama/CodeLlama-34b-Instruct-hf", 2)
    fresh, after_cache = p.features([(0, 512)], []), p.features([(1024, 512)], [])
    assert after_cache[2] > fresh[2]  # attention over the cached prefix
    assert after_cache[3] > fresh[3]  # and its KV read


def test_an_unknown_dtype_is_an_error_naming_the_key():
    config = dict(bundled_model_config("meta-llama/Llama-2-7b-hf"), torch_dtype="int4")
    with pytest.raises(ValueError, match="torch_dtype"):
        Physics.of(config, H100_TFLOPS, H100_TBS, 1)
