"""Issue 35 item 7, speculative decoding with a draft model and per-tenant acceptance:
`engine.speculative.method: draft_model` costs the draft's forward passes by the step model
built for the draft's config.json (hand-computed here), adds them to the target's verification
pass, and gives the draft's weights and KV their GPU memory; `tenant_acceptance` gives tenants
their own rates, which the draws converge to (seeded); KV blocks are conserved with a draft
(the debug checks, under hypothesis)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.speculation import SpeculativeConfig, expected_tokens
from blis_simpy.config.step_models import load
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request
from blis_simpy.engine.latency import latency_model
from blis_simpy.engine.speculative import Drafted, draft_model, draft_passes
from blis_simpy.sim.build import build
from tests.config.test_scenario_fuzz import HOSTILE, check, leaves, replaced
from tests.conftest import BASE, merge, trace_run_scenario, write_trace
from tests.engine.test_invariants import engines, request_rows
from tests.engine.test_speculative import TENANT, spec_data

PHYSICAL = {"type": "physical", "alpha": None, "beta": None}
DRAFT = "qwen/qwen2.5-1.5b-instruct"
H100_BYTES_PER_US = 3.35e12 * 0.85 / 1e6  # hardware_native.json: hbm_tbs x hbm_efficiency
H100_FLOPS_PER_US = 989.4e12 * 0.5 / 1e6  # tflops_peak x mfu
DRAFT_ENGINE = {"kv_blocks": 2000, "speculative": {
    "method": "draft_model", "model": "qwen/qwen2.5-1.5b-instruct",
    "model_config": None, "draft_tokens": 3, "acceptance_rate": 0.7,
    "tenant_acceptance": {"t": 0.9}}}


def draft_data(k: int = 4, rate: float = 0.7, **changes: Any) -> dict[str, Any]:
    return merge(spec_data(k, rate, latency=PHYSICAL), merge({"engine": {"speculative": {
        "method": "draft_model", "model": DRAFT}}}, changes))


def request(progress: int, chunk: int) -> Request:
    """A request scheduled at `progress` with this chunk (-1 - d: a decode drafting d)."""
    req = Request(0, 0, np.zeros(progress + 1, dtype=np.int64), np.zeros(64, dtype=np.int64))
    req.progress, req.chunk = progress, chunk
    return req


def test_the_draft_passes_cover_prefill_chunks_once_and_each_drafted_token():
    """A prefill chunk of 64 at 0, decodes drafting 3 at 100, 1 at 50, none at 70 (its last
    token: chunk -1): pass 1 has the chunk and one token per drafting request, pass 2 and 3
    only the request drafting 3, at context 101 and 102."""
    batch = [request(0, 64), request(100, -4), request(50, -2), request(70, -1)]
    assert draft_passes(batch) == [[(0, 64), (100, 1), (50, 1)], [(101, 1)], [(102, 1)]]
    assert draft_passes([request(70, -1)]) == []


def qwen_1_5b_pass_us(c: Any, contexts: list[int]) -> float:
    """A pass of one token per request at these contexts, by hand from Qwen2.5-1.5B's
    config.json (hidden 1536, 12 heads of 128, 2 KV heads, 28 layers, MLP 8960, vocab 151936,
    bf16) on one H100: the physical model's GPU terms."""
    attention = 1536 * (1536 + 2 * 256) + 1536 * 1536  # q, k, v, o
    mlp = 3 * 1536 * 8960
    lm_head = 151936 * 1536
    weights_us = (28 * (attention + mlp) + lm_head) * 2 / H100_BYTES_PER_US
    n = len(contexts)
    gemm_us = (n * 2 * 28 * (attention + mlp) + n * 2 * lm_head) / H100_FLOPS_PER_US
    kv_entries = sum(ctx + 1 for ctx in contexts)
    kv_us = kv_entries * 2 * 28 * 2 * 128 * 2 / H100_BYTES_PER_US
    attention_us = kv_entries * 4 * 1536 * 28 / H100_FLOPS_PER_US
    return max(c.weights * weights_us, c.gemm * gemm_us) + c.kv_reads * kv_us \
        + c.attention * attention_us


def test_a_draft_models_passes_cost_what_the_physical_model_gives_by_hand():
    scenario = resolve(Scenario.from_dict(draft_data(3)))
    target = latency_model(scenario)
    draft = draft_model(scenario, target)
    assert draft is not None
    c = load("vllm").for_gpu("H100")
    batch = [request(100, -4), request(300, -2)]  # drafting 3 and 1
    by_hand = (qwen_1_5b_pass_us(c, [100, 300]) + qwen_1_5b_pass_us(c, [101])
               + qwen_1_5b_pass_us(c, [102]))
    assert draft.cost_us(batch) == int(by_hand)
    assert 3 * 1000 < by_hand < 3 * 1300  # memory-bound: ~3 GB of weights a pass
    # the step: the target's verification pass over 1 + d positions, plus the draft's passes
    drafted = Drafted(target, draft)
    assert drafted.step_time(4, 2, batch, 0) == target.step_time(4, 2, batch, int(by_hand))


def test_the_native_roofline_costs_the_draft_without_its_step_overhead():
    scenario = resolve(Scenario.from_dict(draft_data(2, latency={"type": "roofline"})))
    target = latency_model(scenario)
    draft = draft_model(scenario, target)
    assert draft is not None
    attention = 1536 * (1536 + 2 * 256) + 1536 * 1536
    weights_s = (28 * (attention + 3 * 1536 * 8960) + 151936 * 1536) * 2 / (3.35e12 * 0.85)
    kv_s = 2 * (101 + 102) * 28 * 2 * 128 * 2 / (3.35e12 * 0.85)  # two passes, one request
    assert draft.cost_us([request(100, -3)]) == int(2 * weights_s * 1e6 + kv_s * 1e6)


def test_a_draft_model_takes_gpu_memory_from_the_kv_cache():
    """vLLM loads the draft beside the target and keeps the draft's KV of a token in the same
    block: blocks = (target blocks x target block bytes - draft weights) // both blocks' bytes."""
    data = draft_data()  # engine.kv_blocks not given: worked out from the GPUs' memory
    target_only = resolve(Scenario.from_dict(merge(data, {"engine": {"speculative": None}})))
    with_draft = resolve(Scenario.from_dict(data))
    blocks = target_only.engine.kv_blocks
    llama_block = 2 * 32 * 8 * 128 * 2 * 16  # K and V, layers, KV heads, head dim, bf16, tokens
    qwen_block = 2 * 28 * 2 * 128 * 2 * 16
    attention = 1536 * 12 * 128 * 2 + 1536 * 2 * 128 * 2
    qwen_weights = (28 * (attention + 3 * 1536 * 8960) + 151936 * 1536) * 2  # tied embeddings
    assert with_draft.engine.kv_blocks == (blocks * llama_block - qwen_weights) // (
        llama_block + qwen_block)
    assert 0.7 * blocks < with_draft.engine.kv_blocks < 0.9 * blocks
    given = resolve(Scenario.from_dict(draft_data(engine={"kv_blocks": 2000})))
    assert given.engine.kv_blocks == 2000  # as given (measured with the draft loaded)


def test_the_draft_model_raises_the_step_time_and_is_reported():
    ngram = blis_simpy.run(spec_data(4, 0.7, latency=PHYSICAL))
    draft = blis_simpy.run(draft_data(4, 0.7))
    spec = draft.summary["speculation"]
    assert spec["method"] == "draft_model" and spec["draft_model"] == DRAFT
    # the same draws (same stream, same rate) on the same arrivals: slower steps only
    assert draft.steps["duration_ms"].median() > ngram.steps["duration_ms"].median() + 1.0


def test_each_tenants_acceptance_converges_to_its_configured_rate():
    """Seeded: code accepts at 0.9, chat at 0.4 (the rest at 0.7); long outputs, so few drafts
    are cut short, and each tenant's accepted / drafted comes within 0.02 of its
    (a + ... + a^k) / k."""
    long = {**TENANT, "output": {"type": "constant", "value": 400}}
    data = merge(spec_data(4, 0.7), {
        "engine": {"speculative": {"tenant_acceptance": {"code": 0.9, "chat": 0.4}}},
        "workload": {"rate_per_s": 12, "duration_s": 10, "tenants": [{"id": "code", **long},
                                                   {"id": "chat", **long}]}})
    spec = blis_simpy.run(data).summary["speculation"]
    by_tenant = spec["by_tenant"]
    for name, rate in (("code", 0.9), ("chat", 0.4)):
        counts = by_tenant[name]
        assert counts["configured_acceptance_rate"] == rate
        assert counts["expected_acceptance_rate"] == pytest.approx(
            (expected_tokens(rate, 4) - 1) / 4)
        assert counts["drafted_tokens"] > 10_000
        assert counts["acceptance_rate"] == pytest.approx(counts["expected_acceptance_rate"],
                                                          abs=0.02)
    assert sum(t["accepted_tokens"] for t in by_tenant.values()) == spec["accepted_tokens"]
    assert sum(t["drafted_tokens"] for t in by_tenant.values()) == spec["drafted_tokens"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines, k=st.integers(1, 6),
       rate=st.sampled_from([0.0, 0.5, 1.0]))
def test_kv_blocks_are_conserved_with_a_draft_model(rows, engine, k, rate):
    """Random small workloads under KV pressure with a draft model, the debug checks on (KV
    conservation after every block operation, the clock): every block is back at the end and
    every completed request emitted its output exactly."""
    engine = {**engine, "speculative": {"draft_tokens": k, "acceptance_rate": rate,
                                        "method": "draft_model", "model": DRAFT}}
    with tempfile.TemporaryDirectory() as folder:
        trace, clock = [], 0
        for seen, (gap, _, own, out) in enumerate(rows, start=1):
            clock += gap
            trace.append((clock / 1000, list(range(seen * 1000, seen * 1000 + own)), out))
        scenario = resolve(trace_run_scenario(write_trace(Path(folder) / "t.csv", trace),
                                              engine=engine, latency=PHYSICAL))
        sim = build(scenario, recorder=Recorder(), checks=True)
        sim.run()  # raises InvariantError if KV conservation or the clock breaks
    records = sim.records()
    instance = sim.fleet.get("instance_0")
    assert not instance.running and instance.kv.used == 0
    req = records.requests
    for i in range(len(req)):
        if req.state[i] == "completed":
            assert req.emitted[i] == req.output_len[i]
    drafted, accepted, steps = records.speculation
    assert 0 <= accepted <= drafted <= k * steps


@pytest.mark.parametrize(("change", "path"), [
    ({"engine": {"speculative": {"model": None}}}, "engine.speculative.model"),
    ({"engine": {"speculative": {"method": "ngram"}}}, "engine.speculative.model"),
    ({"latency": {"type": "blackbox", "alpha": BASE["latency"]["alpha"],
                  "beta": BASE["latency"]["beta"]}}, "engine.speculative.method"),
    ({"engine": {"speculative": {"tenant_acceptance": {"t": 1.5}}}},
     "engine.speculative.tenant_acceptance.t"),
    ({"engine": {"speculative": {"tenant_acceptance": {"nobody": 0.5}}}},
     "engine.speculative.tenant_acceptance.nobody"),
    ({"engine": {"speculative": {"model": "acme/tiny-drafter"}}}, "engine.speculative.model"),
    ({"engine": {"speculative": {"model_config": "/nonexistent/config.json"}}},
     "engine.speculative.model_config"),
])
def test_bad_draft_model_keys_fail_before_the_run_naming_the_key(change, path):
    with pytest.raises(ScenarioError) as err:
        blis_simpy.prepare(merge(draft_data(), change))
    assert err.value.path == path, str(err.value)


def test_a_draft_model_whose_heads_do_not_split_over_the_gpus_is_refused():
    # Qwen2.5-1.5B has 12 attention heads: no split over 8 GPUs
    data = draft_data(model={"name": "meta-llama/llama-3.1-70b-instruct", "tp": 8})
    with pytest.raises(ScenarioError) as err:
        blis_simpy.prepare(data)
    assert err.value.path == "engine.speculative.model"


def test_the_draft_config_is_read_from_a_file(tmp_path):
    config = bundled_model_config(DRAFT)
    (tmp_path / "config.json").write_text(__import__("json").dumps(config))
    from_file = blis_simpy.run(draft_data(2, 0.5, engine={"speculative": {
        "model": "my-drafter", "model_config": str(tmp_path)}}))
    bundled = blis_simpy.run(draft_data(2, 0.5))
    assert from_file.summary["speculation"]["draft_model"] == "my-drafter"
    assert from_file.summary["tokens_per_sec"] == bundled.summary["tokens_per_sec"]


def test_expected_tokens_is_the_geometric_sum():
    assert SpeculativeConfig(draft_tokens=3, acceptance_rate=0.5).expected_tokens() == 1.875
    assert expected_tokens(1.0, 4) == 5.0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(leaves(DRAFT_ENGINE)), HOSTILE)
def test_hostile_values_in_the_draft_model_keys_are_clear_errors_or_bounded_runs(path, value):
    """tests/config's fuzz on every leaf of a draft model's engine section (the draft, its
    config file, the rates, a tenant's rate, the KV blocks): an error naming the section, or a
    run that ends with finite figures."""
    data = merge(draft_data(3, 0.7, engine={"kv_blocks": 2000}), {"workload": {
        "duration_s": 1, "tenants": [{"id": "t", **TENANT}, {"id": "u", **TENANT}]}})
    data["engine"] = replaced(DRAFT_ENGINE, path, value)
    check(data, ("engine",))
