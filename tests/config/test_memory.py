"""A roofline run's default KV cache is what fits in the GPU memory beside the weights, not
1,000,000 blocks (110 MiB of bookkeeping per instance before any request arrives)."""

from __future__ import annotations

from typing import Any

import pytest

from blis_simpy.config import catalog
from blis_simpy.config.memory import memory_kv_blocks
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.conftest import merge

LLAMA = "meta-llama/llama-3.1-8b-instruct"


def roofline(**changes: Any) -> Scenario:
    data = {"version": 1, "model": {"name": LLAMA, "gpu": "H100", "tp": 1},
            "latency": {"type": "roofline"}}
    return Scenario.from_dict(merge(data, changes))


def test_llama_8b_on_one_h100_matches_the_catalogs_measured_size_within_one_percent():
    measured = catalog.bundled().find(LLAMA, "H100", 1, "vllm/vllm-openai:v0.8.4")
    assert measured is not None
    sized = resolve(roofline()).engine.kv_blocks
    assert sized is not None and abs(sized - measured.kv_blocks) / measured.kv_blocks < 0.01


def test_more_gpus_hold_more_blocks_and_bigger_blocks_fewer():
    one = resolve(roofline()).engine.kv_blocks
    two = resolve(roofline(model={"tp": 2})).engine.kv_blocks
    big = resolve(roofline(engine={"block_size": 32})).engine.kv_blocks
    assert one is not None and two is not None and big is not None
    assert two > 2 * one  # the second GPU holds no second copy of the weights
    assert big in (one // 2, one // 2 - 1)


def test_compat_roofline_keeps_the_references_default():
    sc = roofline(compat="blis", workload={"arrival": "constant"})
    assert resolve(sc).engine.kv_blocks == catalog.DEFAULT_KV_BLOCKS


def test_an_explicit_size_wins():
    assert resolve(roofline(engine={"kv_blocks": 1234})).engine.kv_blocks == 1234


def test_unknown_gpu_memory_or_dimensions_give_no_size():
    config = catalog.bundled_model_config(LLAMA)
    assert memory_kv_blocks(config, "B200", 1, 16) is None
    assert memory_kv_blocks({k: v for k, v in config.items() if k != "vocab_size"},
                            "H100", 1, 16) is None
    assert memory_kv_blocks(config, "H100", 1, 10**9) == 0  # not even one block fits


@pytest.mark.parametrize("latency", ["roofline", "physical"])
def test_a_model_that_does_not_fit_is_refused_naming_the_gpus(latency):
    """Llama-3.1-70B's 141 GB of weights on one 80 GB H100: vLLM would not start; it used to
    run on the 1,000,000-block default and say nothing."""
    big = {"model": {"name": "meta-llama/llama-3.1-70b-instruct"}, "latency": {"type": latency}}
    with pytest.raises(ScenarioError) as err:
        resolve(roofline(**big))
    assert err.value.path == "model.tp" and "does not fit" in err.value.problem
    assert resolve(roofline(**merge(big, {"model": {"tp": 2}}))).engine.kv_blocks > 0
    assert resolve(roofline(**merge(big, {"engine": {"kv_blocks": 500}}))).engine.kv_blocks == 500
