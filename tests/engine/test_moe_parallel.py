"""Issue 35 item 4: data and expert parallelism of a mixture of experts in the physical step
model (engine/physical.py: MoeParallel). Each quantity is checked against a figure computed
by hand here, from the same formulas as the reference head's trained-physics model
(sim/latency/trained_physics_model.go and sim/expert_placement.go at inference-sim f90a1e3a)
where the two agree, and the one place they differ (the all-gather volume) is shown."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.config import hardware
from blis_simpy.config.catalog import bundled_model_config
from blis_simpy.config.memory import memory_kv_blocks, model_weight_bytes
from blis_simpy.config.moe import MOE_COMM
from blis_simpy.engine.physical import StepShape
from blis_simpy.engine.roofline_native import NativeShape
from tests.engine.test_physical import decodes, request

H100 = hardware.gpu_spec(hardware.bundled(), "H100")
BW = 3.35e12 * 0.85 / 1e6  # achievable HBM bytes per µs
LINK = 450e9 * 0.8 / 1e6  # achievable NVLink bytes per µs
MIXTRAL = NativeShape.from_hf_config(bundled_model_config("mistralai/Mixtral-8x7B-v0.1"))
LAYERS, HIDDEN, FFN, E, K, B = 32, 4096, 14336, 8, 2, 2
WHOLE_EXPERT_US = LAYERS * 3 * HIDDEN * FFN * B / BW  # one expert in every layer, one GPU


def mixtral(tp: int, dp: int = 1, ep: bool = False, comm: str = "allgather_reducescatter"
            ) -> StepShape:
    return StepShape(MIXTRAL, H100, tp, dp, ep, comm)


def test_item4_data_parallel_ranks_split_the_batch_but_not_the_attention_weights():
    """Each rank runs 1/dp of the batch (its requests, GEMM tokens, KV reads, attention) and
    holds its own attention and LM head: the head's /dp on every token-population term, /tp
    (not /dp) on the weights."""
    batch = decodes(64, 1000)
    one, two = mixtral(1).quantities(batch), mixtral(1, dp=2).quantities(batch)
    assert two[1] == one[1] / 2  # requests per rank
    assert two[3] == pytest.approx(one[3] / 2)  # KV reads
    assert two[4] == pytest.approx(one[4] / 2)  # GEMMs: attention per rank, experts over G
    assert two[5] == pytest.approx(one[5] / 2)  # attention FLOPs
    attention = 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096)
    fixed_us = (attention + 32 * 4096 * 8 + 32000 * 4096) * B / BW  # + routers, LM head
    touched = E * (1 - (1 - K / E) ** 64)
    assert one[2] == pytest.approx(fixed_us + touched * WHOLE_EXPERT_US)
    assert two[2] == pytest.approx(fixed_us + touched / 2 * WHOLE_EXPERT_US)  # experts / G


def test_item4_sliced_experts_read_1_over_g_of_every_touched_expert():
    """Without expert parallelism the experts are sliced over all tp x dp GPUs: the head's
    PerGPUExpertCount = numExperts / moeGroup once every expert is touched."""
    for tp, dp in ((2, 1), (1, 4), (2, 4)):
        q = mixtral(tp, dp).quantities(decodes(256, 100))
        routed = q[2] - mixtral(tp, dp).fixed_us
        assert routed == pytest.approx(E / (tp * dp) * WHOLE_EXPERT_US, rel=1e-6)


def test_item4_expert_parallelism_waits_for_the_gpu_owning_the_most_touched_experts():
    """Whole experts: a GPU of G owns E/G of them, each touched with p = 1 - (1 - k/E)^T, and
    the step waits for the busiest: E[max of G Binomial(E/G, p)]. Hand-computed for Mixtral
    on 2 GPUs and a single decode (p = 1/4, E/G = 4)."""
    p, n = 0.25, 4
    cdf = [sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(j + 1))
           for j in range(n)]
    busiest = sum(1 - c**2 for c in cdf)
    assert busiest == pytest.approx(1.4616, abs=1e-4)
    ep = mixtral(1, dp=2, ep=True)
    assert ep.parallel is not None
    assert ep.parallel.busiest(1.0) == pytest.approx(busiest)
    q = ep.quantities(decodes(1, 100))
    assert q[2] == pytest.approx(ep.fixed_us + busiest * WHOLE_EXPERT_US)
    sliced = mixtral(1, dp=2).quantities(decodes(1, 100))
    assert q[2] > sliced[2]  # one token touches 2 experts: sliced, each GPU reads 2/2 of one
    # Many tokens touch every expert: the busiest GPU owns E/G of them, as sliced reads.
    big_ep = ep.quantities(decodes(512, 100))
    big_sliced = mixtral(1, dp=2).quantities(decodes(512, 100))
    assert big_ep[2] == pytest.approx(big_sliced[2], rel=1e-6)


def test_item4_busiest_gpu_lies_between_the_average_and_all_it_owns():
    for dp in (2, 4, 8):
        par = mixtral(1, dp=dp, ep=True).parallel
        assert par is not None
        for tokens in (1.0, 2.0, 3.0, 8.0, 40.0):
            average = par.touched(tokens) / dp
            assert average - 1e-12 <= par.busiest(tokens) <= min(E / dp, par.touched(tokens))


def test_item4_all_to_all_kernels_move_each_tokens_k_copies_as_the_head_does():
    """deepep/pplx under EP: the head's PerGPUCommTokens = (T/dp) k (G-1)/G 2 hidden states
    per MoE layer, times hidden x bytes (its moeDispatchBasis, all-to-all family); costed
    over NVLink under the link coefficient."""
    tokens, tp, dp = 64, 1, 4
    q = mixtral(tp, dp, ep=True, comm="deepep_low_latency").quantities(decodes(tokens, 100))
    group = tp * dp
    per_gpu_comm_tokens = (tokens / dp) * K * (group - 1) / group * 2
    head_bytes = LAYERS * per_gpu_comm_tokens * HIDDEN * B
    assert q[7] == pytest.approx(head_bytes / LINK)  # tp 1: no attention all-reduce
    # dispatch + combine, two collectives per MoE layer over the 4 GPUs
    assert q[6] == pytest.approx(2 * LAYERS * H100.allreduce_latency_us * math.log2(4))


def test_item4_all_gather_backends_give_every_rank_every_token():
    """allgather_reducescatter (vLLM's default) and naive: each rank receives the other ranks'
    tokens' hidden states on dispatch and sends its share back on combine: 2 T (dp-1)/dp per
    GPU and MoE layer. The head charges (T/dp)(G-1)/G 2, which makes the all-gather k times
    cheaper than the all-to-all that exists to beat it; at tp 1 ours is dp times the head's
    (docs/guides/moe.md, "Where this differs from the reference's head")."""
    tokens, dp = 64, 4
    for comm in ("allgather_reducescatter", "naive"):
        q = mixtral(1, dp, comm=comm).quantities(decodes(tokens, 100))
        ours = LAYERS * 2 * tokens * (dp - 1) / dp * HIDDEN * B
        assert q[7] == pytest.approx(ours / LINK)
        head = LAYERS * (tokens / dp) * (dp - 1) / dp * 2 * HIDDEN * B
        assert ours == pytest.approx(dp * head)
    routed = mixtral(1, dp, ep=True, comm="pplx").quantities(decodes(tokens, 100))
    assert routed[7] < q[7]  # k (G-1)/G/dp = 0.375 against (dp-1)/dp = 0.75


def test_item4_all_to_all_kernels_need_expert_parallelism():
    """vLLM runs its all-to-all kernels only under expert parallelism; without it the dispatch
    all-gathers whatever VLLM_ALL2ALL_BACKEND says."""
    batch = decodes(32, 100)
    assert mixtral(1, 4, comm="deepep_high_throughput").quantities(batch) == \
        mixtral(1, 4).quantities(batch)


def test_item4_tensor_parallel_ranks_still_all_reduce_attention():
    tokens, tp, dp = 32, 2, 2
    q = mixtral(tp, dp).quantities(decodes(tokens, 100))
    ring = 2 * (tp - 1) / tp * HIDDEN * B
    attention = LAYERS * ring * tokens / dp  # one all-reduce per layer over the rank's tokens
    dispatch = LAYERS * 2 * tokens * (dp - 1) / dp * HIDDEN * B
    assert q[7] == pytest.approx((attention + dispatch) / LINK)
    lat = H100.allreduce_latency_us
    assert q[6] == pytest.approx(lat * LAYERS * (math.log2(tp) + 2 * math.log2(tp * dp)))


def test_item4_one_rank_is_the_tensor_parallel_model_with_or_without_expert_parallelism():
    """At dp 1 the MoE output all-reduces over TP as before: expert parallelism changes only
    which GPU reads which expert."""
    batch = decodes(512, 100)
    plain, ep = mixtral(4).quantities(batch), mixtral(4, ep=True).quantities(batch)
    assert mixtral(4).parallel is None
    for i in (0, 1, 3, 4, 5, 6, 7):
        assert ep[i] == pytest.approx(plain[i])
    assert ep[2] == pytest.approx(plain[2], rel=1e-6)  # every expert touched: same bytes


def test_item4_dense_models_have_no_ranks_inside_an_instance():
    dense = NativeShape.from_hf_config(bundled_model_config("meta-llama/Llama-2-7b-hf"))
    with pytest.raises(ValueError, match="mixture of experts"):
        StepShape(dense, H100, 1, 2)
    with pytest.raises(ValueError, match="mixture of experts"):
        StepShape(dense, H100, 1, 1, True)
    with pytest.raises(ValueError, match="comm backend"):
        mixtral(1, 2, comm="carrier-pigeon")


def test_item4_each_rank_has_its_own_kv_cache_beside_its_share_of_the_weights():
    """dp ranks of tp GPUs: each holds the attention and embeddings and 1/dp of the experts,
    and sizes its own KV cache from what is left; the instance has dp times that."""
    config = bundled_model_config("mistralai/Mixtral-8x7B-v0.1")
    weights = model_weight_bytes(config)
    assert weights is not None
    experts = LAYERS * 3 * HIDDEN * FFN * E * B
    block = 2 * LAYERS * 8 * 128 * B * 16  # K and V, 8 KV heads of 128, 16 tokens
    usable = int(81559 * (1 << 20) * 0.9)  # one H100 at vLLM's 0.9
    rank = (usable - (weights - experts * 3 // 4)) // block
    assert memory_kv_blocks(config, "H100", 1, 16, None, dp=4) == 4 * rank
    assert memory_kv_blocks(config, "H100", 1, 16) == 0  # 93 GB do not fit on one GPU


@settings(max_examples=200, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), dp=st.integers(1, 16), ep=st.booleans(),
       comm=st.sampled_from(MOE_COMM),
       batch=st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 4096), st.booleans()),
                      min_size=1, max_size=40))
def test_item4_every_parallel_step_quantity_is_finite_and_ranks_never_add_per_gpu_work(
        tp, dp, ep, comm, batch):
    requests = [request(prompt + done, done, -1) if decode else request(prompt, 0, prompt)
                for prompt, done, decode in batch]
    q = mixtral(tp, dp, ep, comm).quantities(requests)
    assert all(math.isfinite(x) and x >= 0 for x in q)
    alone = mixtral(tp).quantities(requests)
    for i in (1, 3, 4, 5):  # requests, KV reads, GEMMs, attention: per rank
        assert q[i] <= alone[i] * (1 + 1e-12)
    par = mixtral(tp, dp, ep, comm).parallel
    if par is not None:
        tokens = float(sum(1 if decode else prompt for prompt, _, decode in batch))
        busiest = par.busiest(tokens)
        assert par.touched(tokens) / (tp * dp) - 1e-9 <= busiest <= math.ceil(E / (tp * dp))
