"""P/D disaggregation (issue 15): the handoff flow, single KV ownership, backpressure, the
transfer link's timing, the decider, and each request counted once, over random workloads and
pool sizes including saturation."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.library import LIBRARY
from blis_simpy.config.pd_twin import monolithic_twin
from blis_simpy.config.resolve import kv_block_bytes
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import State
from tests.cluster.pd_helpers import MODEL, pd_scenario, run_pd

TERMINAL = {"completed", "rejected", "timed_out"}


def const(tokens: int) -> dict[str, int]:
    return {"mean": tokens, "stdev": 0, "min": tokens, "max": tokens}


def roles(sim) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {inst.id: str(inst.role) for inst in sim.fleet}


def test_transfer_time_is_base_latency_plus_kv_bytes_over_bandwidth():
    # Llama-3.1-8B: 32 layers x (K, V) x 8 KV heads x 128 dims x 2 bytes = 128 KiB a token;
    # a 16-token block is 2 MiB at TP 1 (1 MiB at TP 2). 1,600 prompt tokens = 100 blocks:
    # 100 x 2,097,152 B / 25 GB/s = 8,388.608 µs -> 8,389, plus the 0.05 ms base.
    tp1 = Scenario.from_dict({"version": 1, "model": {"name": MODEL, "gpu": "H100", "tp": 1}})
    tp2 = Scenario.from_dict({"version": 1, "model": {"name": MODEL, "gpu": "H100", "tp": 2}})
    assert kv_block_bytes(tp1) == 2_097_152 and kv_block_bytes(tp2) == 1_048_576
    data = pd_scenario(requests=1, prompt=1600, output=8)
    data["workload"]["prompt"] = const(1600)
    result, _ = run_pd(data)
    row = result.transfers.iloc[0]
    assert (row.blocks, row.bytes, row.outcome) == (100, 209_715_200, "transferred")
    assert round((row.end_s - row.start_s) * 1e6) == 8_389 + 50


def transfer_of(link: dict[str, Any], prompt: int = 1600) -> Any:
    data = pd_scenario(requests=1, prompt=prompt, output=8, pd={"link": link})
    data["workload"]["prompt"] = const(prompt)
    result, _ = run_pd(data)
    return result.transfers.iloc[0], result


def test_pd_transfer_granularity_pays_the_base_latency_per_unit():
    """Seed 001 §6 TransferGranularity: a transfer sent in chunks, or block by block, pays the
    link's base latency for each unit; the bytes take as long as ever. 100 blocks (see above):
    request 8,389 + 50 µs; chunks of 16 blocks: 7 units; blocks: 100 units."""
    for link, units in (({}, 1), ({"granularity": "chunk", "chunk_blocks": 16}, 7),
                        ({"granularity": "block"}, 100)):
        row, _ = transfer_of(link)
        assert row.blocks == 100
        assert round((row.end_s - row.start_s) * 1e6) == 8_389 + 50 * units, link


def test_pd_pipelined_layer_wise_transfer_overlaps_the_prefill_step():
    """Seed 001 §6 PipelineMode (layer-wise): the handoff starts with the prefill step, and
    layer i's KV leaves once the step has computed it, so the KV is on the decode instance
    max(S + c/L + d, E + d/L) after a step from S to E (c = E - S; L = 32 layers of
    Llama-3.1-8B; d the transfer) instead of E + d; the second token comes sooner."""
    plain, plain_result = transfer_of({"bandwidth_gb_s": 5.0})
    piped, piped_result = transfer_of({"bandwidth_gb_s": 5.0, "pipeline": True})
    d = round((plain.end_s - plain.start_s) * 1e6)
    start, end = round(piped.asked_s * 1e6), round(plain.asked_s * 1e6)  # the step: S, E
    assert start < end and piped.reserved_s <= piped.start_s == piped.asked_s
    c = end - start
    expected = max(start + -(-c // 32) + d, end + -(-d // 32))
    assert round(piped.end_s * 1e6) == expected < round(plain.end_s * 1e6)
    assert piped_result.requests.completion_s.iloc[0] < plain_result.requests.completion_s.iloc[0]


def test_pd_with_kv_tiers_keeps_single_ownership_and_offloads_on_both_pools():
    """Seed 001 §6: KV tiers combined with P/D. Each pool's instances have their own tiers;
    a prefill instance's lower tiers keep copies by content hash (never blocks another
    instance owns), so single ownership holds at every check while both pools offload."""
    tiers = {"cpu_blocks": 300, "storage_blocks": 50, "offload": "lazy", "eviction": "lfu",
             "cpu_link": {"blocks_per_s": 20_000}, "storage_link": {"blocks_per_s": 5_000}}
    data = pd_scenario(requests=40, rate=200, prompt=600, output=48, kv_blocks=200,
                       decode_kv_blocks=200, kv_tiers=tiers)
    data["workload"]["prefix_tokens"] = 512
    result, sim = run_pd(data, watch=True)
    assert result.summary["completed_requests"] == 40
    assert result.summary["kv_tiers"]["offloaded_blocks"] > 0
    offloading = {inst.id for inst in sim.fleet if inst.kv.log.offloads}
    assert {str(inst.role) for inst in sim.fleet if inst.id in offloading} == {
        "prefill", "decode"}


def test_pd_link_keys_are_validated():
    """Seed 001 §6: chunk_blocks is read by chunk granularity only; bad values name the key."""
    for link, key in (({"chunk_blocks": 4}, "chunk_blocks"), ({"granularity": "layer"},
                                                              "granularity"),
                      ({"granularity": "chunk", "chunk_blocks": 0}, "chunk_blocks"),
                      ({"pipeline": "yes"}, "pipeline")):
        with pytest.raises(ScenarioError) as err:
            Scenario.from_dict(pd_scenario(pd={"link": link}))
        assert err.value.path.endswith(f"pd.link.{key}"), (link, err.value.path)


def test_a_shared_link_queues_concurrent_transfers():
    data = pd_scenario(prefill=2, decode=1, requests=2, rate=1e6, prompt=1600, output=4,
                       pd={"link": {"shared": True, "bandwidth_gb_s": 1}})
    data["workload"]["prompt"] = const(1600)
    result, _ = run_pd(data)
    first, second = result.transfers.sort_values("start_s").itertuples()
    assert second.start_s >= first.end_s - 1e-9  # one link: the second waits for the first


def test_ttft_is_the_prefill_first_token_and_tpot_carries_the_transfer_gap():
    data = pd_scenario(requests=1, prompt=1600, output=8)
    data["workload"]["prompt"] = const(1600)
    data["workload"]["output"] = const(8)
    result, sim = run_pd(data)
    req, row = result.requests.iloc[0], result.transfers.iloc[0]
    assert roles(sim)[row.prefill] == "prefill" and roles(sim)[req.instance] == "decode"
    # streamed from the prefill instance (its step's end plus the output delay), before the
    # KV has moved; the handoff starts when that step ends
    assert row.asked_s <= req.first_token_s < row.end_s
    transfer_ms = (row.end_s - row.asked_s) * 1000
    assert req.itl_mean_ms * 7 >= transfer_ms  # the second token waited for the KV
    assert req.completion_s > row.end_s


@pytest.mark.parametrize(("decider", "expected"), [
    ({"type": "always"}, 1.0), ({"type": "never"}, 0.0),
    ({"type": "prefix-threshold", "threshold": 100_000}, 0.0),
    ({"type": "prefix-threshold", "threshold": 0}, 1.0)])
def test_the_decider_chooses_which_requests_are_disaggregated(decider, expected):
    data = pd_scenario(requests=20, output=8, pd={"decider": decider})
    data["workload"]["output"] = const(8)
    result, sim = run_pd(data)
    assert result.summary["pd"]["disaggregated_fraction"] == expected
    assert set(result.requests.final_state) == {"completed"}
    if expected == 0.0:
        assert {roles(sim)[i] for i in result.requests.instance} == {"decode"}


def test_prefix_threshold_counts_only_the_uncached_prompt():
    data = pd_scenario(requests=30, rate=5, prompt=64, output=8,
                       pd={"decider": {"type": "prefix-threshold", "threshold": 256}})
    data["workload"]["prefix_tokens"] = 512  # the shared prefix is cached after the first
    result, _ = run_pd(data)
    fraction = result.summary["pd"]["disaggregated_fraction"]
    assert 0 < fraction < 0.2  # the first (cold) one or few go to prefill, the rest stay


@pytest.mark.parametrize("choice", ["routing", "handoff"])
def test_decode_instance_chosen_at_routing_or_at_handoff(choice):
    result, sim = run_pd(pd_scenario(prefill=2, decode=3, requests=30, rate=50,
                                     pd={"decode_choice": choice}))
    assert set(result.requests.final_state) == {"completed"}
    assert {roles(sim)[d] for d in result.transfers.decode} == {"decode"}
    assert result.transfers.decode.nunique() == 3


def test_backpressure_stops_prefill_admission_and_records_pd_backpressure():
    # decode holds 2 prompts' KV: handoffs wait for room, the prefill instance hits its bound
    data = pd_scenario(requests=30, rate=200, prompt=1024, output=64, decode_kv_blocks=160,
                       pd={"max_held": 1}, max_running=16)
    data["workload"]["prompt"] = const(1024)
    result, _ = run_pd(data, watch=True)
    anomalies = result.anomalies
    assert anomalies is not None and "pd_backpressure" in set(anomalies.type)
    assert result.summary["pd"]["kv_room_wait_max_ms"] > 0
    assert set(result.requests.final_state) == {"completed"}  # waited, none dropped


def test_a_handoff_that_finds_no_room_in_time_is_dropped_with_its_reason():
    data = pd_scenario(requests=20, rate=500, prompt=1024, output=400, decode_kv_blocks=140,
                       pd={"handoff_timeout_s": 0.05, "max_held": 8})
    data["workload"]["prompt"] = const(1024)
    result, _ = run_pd(data, watch=True)
    dropped = result.requests[result.requests.final_state == "rejected"]
    assert len(dropped) and set(dropped.reject_code) == {"pd_handoff_timeout"}
    assert result.summary["pd"]["handoffs_dropped"] == {"pd_handoff_timeout": len(dropped)}


def test_a_request_that_cannot_fit_the_decode_pool_is_dropped_at_once():
    data = pd_scenario(requests=1, prompt=1024, output=2000, decode_kv_blocks=100)
    data["workload"]["prompt"] = const(1024)
    data["workload"]["output"] = const(2000)
    result, _ = run_pd(data)
    assert result.requests.iloc[0].reject_code == "pd_exceeds_decode_kv"


def test_client_timeouts_during_handoffs_free_both_sides():
    data = pd_scenario(requests=40, rate=400, prompt=1024, output=200, decode_kv_blocks=150,
                       timeout_s=0.3)
    result, sim = run_pd(data, watch=True)
    assert set(result.requests.final_state) <= TERMINAL
    assert "abandoned" in set(result.transfers.outcome)
    for inst in sim.fleet:
        assert inst.kv.used == 0 or inst.kv_holders()  # nothing leaked once all ended
        assert not inst.kv_holders()


@st.composite
def pd_cases(draw: st.DrawFn) -> dict:
    """Random pools, loads and KV sizes, from idle to saturated decode pools."""
    if draw(st.booleans()):  # saturated: a burst of long requests into a small decode pool
        load = {"rate": 5000.0, "requests": draw(st.integers(10, 30)),
                "prompt": draw(st.integers(800, 1500)), "output": draw(st.integers(50, 200)),
                "decode_kv_blocks": draw(st.sampled_from([130, 200]))}
    else:
        load = {"rate": draw(st.sampled_from([5.0, 50.0, 500.0])),
                "requests": draw(st.integers(1, 30)),
                "prompt": draw(st.sampled_from([16, 256, 1000, 1500]) | st.integers(16, 1500)),
                "output": draw(st.sampled_from([1, 8, 200]) | st.integers(1, 200)),
                "decode_kv_blocks": draw(st.sampled_from([None, 300]))}
    return pd_scenario(
        prefill=draw(st.integers(1, 3)), decode=draw(st.integers(1, 3)), **load,
        seed=draw(st.integers(0, 1000)), max_running=draw(st.sampled_from([2, 16])),
        timeout_s=draw(st.sampled_from([None, 0.5])),
        pd={"max_held": draw(st.integers(1, 4)),
            "decode_choice": draw(st.sampled_from(["routing", "handoff"])),
            "handoff_timeout_s": draw(st.sampled_from([0.2, 30.0])),
            "decider": draw(st.sampled_from([{"type": "always"}, {"type": "never"}, {
                "type": "prefix-threshold", "threshold": 400}])),
            "link": {"shared": draw(st.booleans()),
                     "bandwidth_gb_s": draw(st.sampled_from([1.0, 25.0])),
                     "pipeline": draw(st.booleans()), **draw(st.sampled_from([
                         {}, {"granularity": "block"},
                         {"granularity": "chunk", "chunk_blocks": 4}]))}},
        kv_tiers=draw(st.sampled_from([None, {
            "cpu_blocks": 150, "storage_blocks": 40,
            "offload": draw(st.sampled_from(["mirror", "threshold", "lazy"])),
            "eviction": draw(st.sampled_from(["lru", "lfu", "priority"])),
            "cpu_link": {"blocks_per_s": 20_000}, "storage_link": {"blocks_per_s": 5_000}}])))


# 40 examples in `make test`; `make test-long` (BLIS_TEST_PROFILE=long) gives its count
PROPERTY = settings(max_examples=settings.default.max_examples
                    if os.environ.get("BLIS_TEST_PROFILE") else 40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(pd_cases())
def test_pd_ownership(data):
    """Every KV block has exactly one owner at every moment: checked after every block
    operation, at every handoff event and every 0.5 ms of simulated time, and nothing is held
    once the run has ended."""
    _, sim = run_pd(data, watch=True)
    for inst in sim.fleet:
        assert not inst.kv_holders() and inst.kv.used == sum(
            1 for c in inst.kv.refcount if c)


@PROPERTY
@given(pd_cases())
def test_pd_handoff(data):
    """Every disaggregated request is prefilled once, transferred once and decoded once, or
    dropped or abandoned at the handoff with a reason; decoding starts only after its
    transfer; the run ends (no deadlock) with every request in one terminal state."""
    result, sim = run_pd(data)
    kinds = roles(sim)
    requests = result.requests.set_index("id")
    assert set(requests.final_state) <= TERMINAL
    transfers = result.transfers
    assert transfers.request.is_unique
    for row in transfers.itertuples():
        req = requests.loc[row.request]
        assert kinds[row.prefill] == "prefill"
        if row.outcome == "transferred":
            assert row.asked_s <= row.reserved_s <= row.start_s <= row.end_s
            assert kinds[req.instance] == "decode"
            if req.final_state == "completed":
                assert req.completion_s > row.end_s  # its second token came after the KV
        else:
            assert row.reason and row.outcome in ("dropped", "abandoned")
            assert req.final_state in ("rejected", "timed_out")
    moved = set(transfers.request)
    for name, req in requests.iterrows():
        if name not in moved and req.final_state == "completed":
            # kept whole (decider), or one output token: never handed off
            assert kinds[req.instance] == "decode" or req.output_tokens <= 1


@PROPERTY
@given(pd_cases())
def test_no_double_counting(data):
    """Each request is counted once in the completed count and the throughput: completions
    split over the pools add up to the summary's, output tokens are those of the completed
    requests, and every decode step token belongs to one request's stream."""
    result, _ = run_pd(data)
    summary, requests = result.summary, result.requests
    completed = requests[requests.final_state == "completed"]
    assert summary["completed_requests"] == len(completed)
    pools = summary["pd"]["pools"]
    assert pools["prefill"]["completed_requests"] + pools["decode"]["completed_requests"] \
        == len(completed)
    # tokens streamed, each once (native: partial streams of timed-out requests too)
    assert summary["total_output_tokens"] == int(requests.generated_tokens.sum())
    assert (completed.generated_tokens == completed.output_tokens).all()
    steps = result.steps
    decodes = int(steps.decode_requests.sum())
    emitted = int(requests.generated_tokens.sum())
    first = int((requests.generated_tokens > 0).sum())  # first tokens come from prefills
    # A request whose client leaves while a step computing its next token is under way
    # never receives that token (seed D.5.2: it is emitted at the step's end): one at most
    # per request that timed out.
    left = int((requests.final_state == "timed_out").sum())
    assert emitted - first - int(requests.preemptions.sum()) <= decodes <= emitted - first + left


def test_same_seed_same_pd_run():
    data = pd_scenario(prefill=2, decode=2, requests=40, rate=100, decode_kv_blocks=300)
    a, _ = run_pd(data)
    b, _ = run_pd(data)
    assert a.requests.equals(b.requests) and a.transfers.equals(b.transfers)
    assert a.summary == b.summary


def test_transferring_is_a_state_only_pd_runs_use():
    assert State.TRANSFERRING == "transferring"


def autoscaled(data: dict[str, Any]) -> dict[str, Any]:
    """Both pools from 1 to 4 replicas under a queue-depth autoscaler without cooldown."""
    pools = data["deployment"]["models"][0]["configs"][0]["pd"]
    pools["prefill"]["replicas"] = {"min": 1, "max": 4}
    pools["decode"]["replicas"] = {"min": 1, "max": 4}
    data["deployment"]["autoscaler"] = {
        "interval_s": 0.5, "policy": {"type": "queue-depth",
                                      "params": {"up_per_replica": 4, "cooldown_s": 0}}}
    return data


def test_the_autoscaler_scales_the_prefill_and_decode_pools_independently():
    # long prompts, two output tokens: prefill is the bottleneck, decode idles
    data = pd_scenario(requests=300, rate=60, prompt=3000, output=2)
    data["workload"]["output"] = const(2)
    result, sim = run_pd(autoscaled(data))
    ups = result.scale_events[result.scale_events.action == "up"]
    assert set(ups.config) == {"pd/prefill"}
    configs = result.summary["deployment"]["configs"]
    assert set(configs) == {"pd/prefill", "pd/decode"}
    assert result.summary["pd"]["pools"]["prefill"]["instances"] > 1
    assert result.summary["pd"]["pools"]["decode"]["instances"] == 1
    assert {str(i.role) for i in sim.fleet} == {"prefill", "decode"}


def test_the_autoscaler_scales_the_decode_pool_when_decode_is_the_bottleneck():
    # short prompts, long outputs, four batch slots per decode instance
    data = pd_scenario(requests=200, rate=40, prompt=64, output=400, max_running=4)
    data["workload"]["output"] = const(400)
    result, _ = run_pd(autoscaled(data))
    ups = result.scale_events[result.scale_events.action == "up"]
    assert set(ups.config) == {"pd/decode"}
    assert result.summary["pd"]["pools"]["decode"]["instances"] > 1
    assert result.summary["pd"]["pools"]["prefill"]["instances"] == 1


def test_pd_vs_monolithic_runs_the_same_gpus_and_workload_both_ways():
    scenario = Scenario.from_yaml(LIBRARY / "pd-vs-monolithic.yaml")
    twin = monolithic_twin(scenario)
    (config,) = twin.deployment.models[0].configs
    assert config.architecture == "monolithic" and config.replicas.min == config.replicas.max == 4
    split, whole = blis_simpy.run(scenario), blis_simpy.run(twin)
    assert split.requests.input_tokens.equals(whole.requests.input_tokens)
    assert split.summary["pd"]["pools"]["prefill"]["instances"] == 3
    assert "pd" not in whole.summary and whole.transfers is None
    # long prompts, tight TPOT: the split wins on goodput (DistServe)
    assert split.metrics["goodput_per_s"] > 2 * whole.metrics["goodput_per_s"]
    target = scenario.evaluation.slo_targets["default"].tpot_ms
    assert split.metrics["tpot_p90_ms"] < target < whole.metrics["tpot_p90_ms"]


def test_a_twin_needs_pools_of_the_same_hardware():
    data = pd_scenario(pd={"decode": {"replicas": {"min": 1, "max": 1}, "tp": 2}})
    with pytest.raises(ScenarioError, match="same GPUs"):
        monolithic_twin(Scenario.from_dict(data))


def test_transfer_queue_depth_never_goes_below_zero_and_ends_empty():
    data = pd_scenario(prefill=2, decode=1, requests=30, rate=300, decode_kv_blocks=200,
                       pd={"link": {"shared": True, "bandwidth_gb_s": 2}})
    result, _ = run_pd(data)
    depth = result.transfer_queue_table.array("waiting_transfers")
    assert depth.min() >= 0 and depth[-1] == 0 and depth.max() > 1
    assert result.summary["pd"]["transfer_queue_peak"] == depth.max()


def test_decode_instances_never_prefill_a_handed_over_request():
    result, sim = run_pd(pd_scenario(prefill=2, decode=2, requests=40, rate=100))
    kinds = roles(sim)
    steps = result.steps
    decode = steps[steps.instance.map(kinds) == "decode"]
    assert len(decode) and int(decode.prefill_tokens.sum()) == 0  # KV arrives, no prefill
    prefill = steps[steps.instance.map(kinds) == "prefill"]
    assert int(prefill.decode_requests.sum()) == 0  # prefill instances never decode
