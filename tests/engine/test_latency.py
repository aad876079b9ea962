"""Step-time adapters: what the engine hands the latency models."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from blis_simpy.api import run
from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.resolve import resolve
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.engine.latency import (
    BlackboxLatency,
    NativeRooflineLatency,
    RooflineLatency,
    latency_model,
)
from blis_simpy.engine.step import DECODE
from tests.conftest import scenario


class Recording:
    def __init__(self):
        self.calls = []

    def step_time(self, prefills, decodes):
        self.calls.append((list(prefills), list(decodes)))
        return 1


def test_blackbox_truncates_like_go_int64():
    latency = BlackboxLatency([100.9, 0.5, 7.99], [1000.7, 2.5, 0.3])
    assert latency.queue_delay(3) == 102  # 100.9 + 1.5 = 102.4
    assert latency.output_delay == 7
    assert latency.step_time(3, 2, [], 0) == 1008  # 1000.7 + 7.5 + 0.6 = 1008.8


def test_roofline_sees_cached_context_as_prefill_start():
    """A request admitted with 64 cached tokens prefills from position 64 (the reference
    passes 0, ignoring the cached context's attention cost)."""
    model = Recording()
    latency = RooflineLatency([0, 0, 0], model)  # type: ignore[arg-type]
    cached = Request(0, 0, np.arange(100), np.arange(5))
    cached.progress, cached.chunk = 64, 36
    decoding = Request(1, 0, np.arange(10), np.arange(5))
    decoding.progress, decoding.chunk = 12, DECODE
    latency.step_time(36, 1, [cached, decoding], 0)
    assert model.calls == [([(64, 36)], [12])]


def test_extra_step_time_is_added_as_is():
    """The step-time input for time spent beyond compute (KV loads, warm-up): zero today,
    added unchanged by every model."""
    latency = BlackboxLatency([0, 0, 0], [1000.7, 2.5, 0.3])
    assert latency.step_time(3, 2, [], 250) == latency.step_time(3, 2, [], 0) + 250


def roofline_scenario(**latency: object):
    return resolve(scenario(latency={"type": "roofline", "alpha": None, "beta": None,
                                     **latency}))


def test_native_mode_uses_the_native_roofline_and_compat_the_reference():
    native = roofline_scenario()
    assert isinstance(latency_model(native), NativeRooflineLatency)
    compat = dataclasses.replace(native, compat="blis")
    assert isinstance(latency_model(compat), RooflineLatency)


def test_native_roofline_costs_each_request_by_its_own_tokens():
    latency = latency_model(roofline_scenario())
    prefill = Request(0, 0, np.arange(100), np.arange(5))
    prefill.progress, prefill.chunk = 64, 36
    decoding = Request(1, 0, np.arange(10), np.arange(5))
    decoding.progress, decoding.chunk = 12, DECODE
    assert isinstance(latency, NativeRooflineLatency)
    assert latency.step_time(36, 1, [prefill, decoding], 7) == \
        latency.model.step_time([(64, 36), (12, 1)]) + 7


def test_an_unmodelled_config_field_is_a_run_warning(tmp_path):
    config = {**bundled_model_config("meta-llama/llama-3.1-8b-instruct"),
              "quantization_config": {"quant_method": "fp8"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = run(roofline_scenario(model_config=str(tmp_path)))
    assert any("quantization_config (fp8)" in w for w in result.summary["warnings"])
    assert result.summary["completed_requests"] == 40


@pytest.mark.parametrize(("extra", "field"), [
    ({"num_experts": 64}, "num_experts_per_tok"),  # Qwen-MoE naming, read: needs its top-k
    ({"kv_lora_rank": 512}, "qk_rope_head_dim"),  # latent attention needs all its widths
])
def test_an_unusable_model_config_field_is_an_error_naming_it(tmp_path, extra, field):
    config = {**bundled_model_config("meta-llama/llama-3.1-8b-instruct"), **extra}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ScenarioError, match=rf"latency\.model_config: .*'{field}'"):
        latency_model(roofline_scenario(model_config=str(tmp_path)))


def test_a_tp_that_cannot_split_the_heads_is_refused():
    """Mixtral has 32 heads and 8 KV heads: vLLM refuses tp 3 (it ran, as if it could)."""
    with pytest.raises(ScenarioError) as err:
        latency_model(resolve(scenario(
            model={"name": "mistralai/Mixtral-8x7B-v0.1", "gpu": "H100", "tp": 3},
            latency={"type": "roofline", "alpha": None, "beta": None})))
    assert err.value.path == "model.tp"
    assert "1, 2, 4, 8, 16, 32" in str(err.value)
