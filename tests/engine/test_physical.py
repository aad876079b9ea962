"""The physical step model (engine/physical.py): each quantity checked against a hand-computed
figure, the step pays the longer of its weight reads and GEMMs, and the API server in front
of an instance is a FIFO queue of requests and streamed tokens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.config import hardware
from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.step_models import StepCoefficients
from blis_simpy.core.request import Request
from blis_simpy.engine.physical import (
    ApiServer,
    PhysicalLatency,
    StepShape,
    step_terms,
    step_us,
)
from blis_simpy.engine.roofline_native import NativeShape

H100 = hardware.gpu_spec(hardware.bundled(), "H100")
BW = 3.35e12 * 0.85 / 1e6  # achievable bytes per µs
ONES = StepCoefficients(step_us=0.0, request_us=0.0, weights=1.0, kv_reads=1.0, gemm=1.0,
                        attention=1.0, allreduce=1.0, link=1.0, api_fixed_us=0.0,
                        api_request_us=0.0, api_input_token_us=0.0, api_output_token_us=0.0,
                        intake_steps=0.0)


def shape(model: str, tp: int) -> StepShape:
    return StepShape(NativeShape.from_hf_config(bundled_model_config(model)), H100, tp)


def request(prompt: int, progress: int, chunk: int) -> Request:
    req = Request(0, 0, np.zeros(prompt, dtype=np.int64), np.zeros(10, dtype=np.int64))
    req.progress, req.chunk = progress, chunk
    return req


def decodes(n: int, context: int) -> list[Request]:
    return [request(context, context, -1) for _ in range(n)]


def test_dense_decode_reads_the_weights_once_and_the_kv_by_context():
    s = shape("meta-llama/Llama-2-7b-hf", 1)
    one, many = s.quantities(decodes(1, 100)), s.quantities(decodes(64, 100))
    # Llama-2-7B: attention 2.15e9 + MLP 4.33e9 + LM head 0.13e9 parameters, fp16.
    assert one[2] == pytest.approx(6.607e9 * 2 / BW, rel=0.001)
    assert many[2] == one[2]  # a bigger batch reads the same weights
    kv_per_token = 2 * 32 * 32 * 128 * 2  # K and V, 32 layers, 32 heads x 128, fp16
    assert many[3] == pytest.approx(64 * 101 * kv_per_token / BW)
    assert many[4] == pytest.approx(64 * one[4])  # GEMM FLOPs per decode token
    assert (many[0], many[1], many[6], many[7]) == (1.0, 64.0, 0.0, 0.0)  # no TP traffic


def test_a_step_pays_the_longer_of_its_weight_reads_and_its_gemms():
    s = shape("meta-llama/Llama-2-7b-hf", 1)
    small, big = s.quantities(decodes(8, 100)), s.quantities([request(4096, 0, 4096)])
    assert small[2] > small[4] and big[4] > big[2]
    assert step_us(small, ONES) == pytest.approx(small[2] + small[3] + small[5])
    assert step_us(big, ONES) == pytest.approx(big[4] + big[3] + big[5])
    slow_gemm = StepCoefficients(**{**ONES.as_dict(), "gemm": 2.0})
    assert step_us(small, slow_gemm) == pytest.approx(step_us(small, ONES))
    assert step_us(big, slow_gemm) == pytest.approx(2 * big[4] + big[3] + big[5])


def test_mixture_of_experts_reads_the_experts_its_tokens_touch():
    s = shape("mistralai/Mixtral-8x7B-v0.1", 2)
    expert_bytes = 32 * 3 * 4096 * 14336 * 2 / 2  # one expert's MLP over 32 layers, per GPU
    one, batch = s.quantities(decodes(1, 500)), s.quantities(decodes(32, 500))
    touched = 8 * (1 - (1 - 2 / 8) ** 32)
    assert batch[2] - one[2] == pytest.approx((touched - 2) * expert_bytes / BW)
    assert batch[6] == 2 * 32 * H100.allreduce_latency_us  # two all-reduces per layer at TP 2
    assert shape("mistralai/Mixtral-8x7B-v0.1", 8).quantities(decodes(1, 500))[6] == \
        3 * batch[6]  # log2(8) = 3 times the latency of two GPUs


def test_prefill_cost_grows_with_the_chunk_and_its_cached_prefix():
    s = shape("codellama/CodeLlama-34b-Instruct-hf", 2)
    fresh, after = s.quantities([request(1536, 0, 512)]), s.quantities([request(1536, 1024, 512)])
    assert after[5] > fresh[5]  # attention over the cached prefix
    assert after[3] > fresh[3]  # and its KV read
    assert after[4] == fresh[4]  # the same GEMMs


def test_the_api_server_queues_requests_and_streamed_tokens_first_come_first_served():
    c = StepCoefficients(**{**ONES.as_dict(), "api_fixed_us": 100.0, "api_request_us": 1000.0,
                            "api_input_token_us": 1.0, "api_output_token_us": 10.0})
    api = ApiServer(c)
    assert api.arrive(0.0, 500) == pytest.approx(100 + 1000 + 500)  # idle: its own work
    assert api.arrive(200.0, 0) == pytest.approx(100 + (1500 - 200) + 1000)  # behind the first
    api.stream(3000.0, 5000.0, 100)  # 100 tokens of work join at 5000 µs
    assert api.arrive(4000.0, 0) == pytest.approx(100 + 1000)  # before them: not delayed
    assert api.arrive(5500.0, 0) == pytest.approx(100 + (6000 - 5500) + 1000)  # behind them


def test_a_busy_engine_takes_a_request_in_behind_its_running_step():
    class Clock:
        now = 0.0

    clock = Clock()
    c = StepCoefficients(**{**ONES.as_dict(), "api_request_us": 100.0, "intake_steps": 0.5})
    model = PhysicalLatency(shape("meta-llama/Llama-2-7b-hf", 1), c).bind(clock)
    assert model.queue_delay(0) == 100  # an idle engine: the API server's work only
    duration = model.step_time(0, 8, decodes(8, 100), 0)
    assert model.queue_delay(0) == int(200 + 0.5 * duration)  # behind the first, then the step
    clock.now = duration + 1000.0
    assert model.queue_delay(0) == 100  # the step has ended: nothing to wait for


def test_each_bound_instance_has_its_own_api_server():
    class Clock:
        now = 0.0

    clock = Clock()
    c = StepCoefficients(**{**ONES.as_dict(), "api_request_us": 1000.0})
    model = PhysicalLatency(shape("meta-llama/Llama-2-7b-hf", 1), c)
    a, b = model.bind(clock), model.bind(clock)
    assert a.queue_delay(0) == b.queue_delay(0) == 1000  # one request each: no queue
    assert a.queue_delay(0) == 2000  # a's second request waits for a's first
    assert model.queue_delay(0) == 1000  # unbound: no clock, no queue


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1e6), min_size=9, max_size=9),
       st.lists(st.floats(0.0, 1e3), min_size=9, max_size=9))
def test_step_terms_give_the_dataclass_formula_bit_for_bit(q, k):
    """The model reads its coefficients once (`step_terms`); the duration is the formula over
    the dataclass's fields, the same products added in the same order."""
    c = StepCoefficients(**{**ONES.as_dict(), **dict(zip(
        ("step_us", "request_us", "weights", "kv_reads", "gemm", "attention", "allreduce",
         "link", "graph_layer_us"), k, strict=True))})
    expected = (c.step_us * q[0] + c.request_us * q[1] + max(c.weights * q[2], c.gemm * q[4])
                + c.kv_reads * q[3] + c.attention * q[5] + c.allreduce * q[6] + c.link * q[7]
                + c.graph_layer_us * q[8])
    assert step_us(q, c) == expected
    assert PhysicalLatency(shape("meta-llama/Llama-2-7b-hf", 1), c).terms == step_terms(c)
