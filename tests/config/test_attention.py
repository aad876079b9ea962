"""Issue 35 item 4: DeepSeek-style multi-head latent attention read (config/attention.py): its
weights, its KV cache (one latent per token and layer, whole on every GPU of the TP group)
and its step cost in the native models."""

from __future__ import annotations

import pytest

from blis_simpy.config import hardware
from blis_simpy.config.attention import LatentAttention, latent_attention
from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.kv_tiers import block_bytes
from blis_simpy.config.memory import memory_kv_blocks, model_weight_bytes
from blis_simpy.engine.physical import StepShape
from blis_simpy.engine.roofline_native import NativeShape

LITE = bundled_model_config("deepseek-ai/DeepSeek-V2-Lite")
H100 = hardware.gpu_spec(hardware.bundled(), "H100")
BW = 3.35e12 * 0.85 / 1e6
LATENT = 512 + 64  # kv_lora_rank + qk_rope_head_dim


def test_item4_deepseek_v2_lite_reads_its_latent_attention():
    assert latent_attention(LITE) == LatentAttention(512, 64, 128, 128, 0)
    assert latent_attention(bundled_model_config("mistralai/Mixtral-8x7B-v0.1")) is None


def test_item4_deepseek_v2_lite_weighs_its_published_15_7b_parameters():
    """Attention 27 x 13.76M (query 6.29M, latent 1.18M, up-projection 2.10M, output 4.19M),
    26 MoE layers of 64 experts + 2 shared + router, one dense layer, embeddings."""
    attention = 2048 * 16 * 192 + 2048 * LATENT + 512 * 16 * 256 + 16 * 128 * 2048
    assert latent_attention(LITE).params(2048, 16) == attention  # type: ignore[union-attr]
    weights = model_weight_bytes(LITE)
    assert weights is not None
    assert weights / 2 == pytest.approx(15.7e9, rel=0.01)


def test_item4_the_latent_is_cached_whole_on_every_gpu():
    per_gpu = 27 * LATENT * 2 * 16  # layers x latent x bf16 x 16 tokens
    assert block_bytes(LITE, 1, 16) == block_bytes(LITE, 4, 16) == per_gpu
    usable = int(81559 * (1 << 20) * 0.9)
    weights = model_weight_bytes(LITE)
    assert weights is not None
    assert memory_kv_blocks(LITE, "H100", 2, 16) == (2 * usable - weights) // (2 * per_gpu)


def test_item4_latent_attention_step_terms():
    shape = NativeShape.from_hf_config(LITE)
    one, two = StepShape(shape, H100, 1), StepShape(shape, H100, 2)
    assert one.kv_us_per_token == pytest.approx(27 * LATENT * 2 / BW)
    assert two.kv_us_per_token == one.kv_us_per_token  # not split by TP
    flops = H100.flops_per_s / 1e6
    assert one.attn_us_per_pair == pytest.approx(2 * 16 * (2 * 512 + 64) * 27 / flops)
    assert two.attn_us_per_pair == pytest.approx(one.attn_us_per_pair / 2)  # heads split


@pytest.mark.parametrize("key", ["qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"])
def test_item4_a_missing_latent_width_is_an_error_naming_it(key):
    with pytest.raises(ValueError, match=key):
        latent_attention({**LITE, key: None})
    with pytest.raises(ValueError, match="q_lora_rank"):
        latent_attention({**LITE, "q_lora_rank": -1})
