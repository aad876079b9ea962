"""A server's captured graphs (engine/physical.py): a decode step of more requests than the
server runs in its captured CUDA graphs (compiled by torch.compile, where it is told to) runs
outside them and pays `graph_layer_us` per layer. The limit is the server's setting
(`latency.graph_max_batch`, else the coefficient set's `graph_max_batch`, the family's
documented default); native mode's physical model only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import blis_simpy
from blis_simpy.config import step_models
from blis_simpy.config.catalog import bundled_model_config, data_dir
from blis_simpy.config.hardware import bundled, gpu_spec
from blis_simpy.core.errors import ScenarioError
from blis_simpy.engine.physical import NO_GRAPH_LIMIT, StepShape, step_us
from blis_simpy.engine.roofline_native import NativeShape

# 48 requests decoding at once: over a limit of 32, under the shipped sets' defaults.
SCENARIO = {"version": 1, "seed": 3,
            "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100", "tp": 1},
            "workload": {"type": "distribution", "num_requests": 48, "rate_per_s": 1e6,
                         "prompt": {"mean": 64, "stdev": 0, "min": 64, "max": 64},
                         "output": {"mean": 100, "stdev": 0, "min": 100, "max": 100}}}


def run(**latency):
    return blis_simpy.run({**SCENARIO, "latency": {"type": "physical", "coefficients": "sglang",
                                                   **latency}})


def test_the_shipped_sets_carry_their_servers_default_limits():
    assert step_models.bundled("vllm").graph_max_batch == 512  # max_cudagraph_capture_size
    assert step_models.bundled("sglang").graph_max_batch == 160  # cuda_graph_max_bs
    assert step_models.bundled("sglang").coefficients.graph_layer_us > 0
    assert step_models.graph_max_batch("my-own-server") is None


def test_a_step_over_the_limit_pays_per_layer_and_one_under_it_does_not():
    config = bundled_model_config("meta-llama/llama-3.1-8b-instruct")
    shape = StepShape(NativeShape.from_hf_config(config), gpu_spec(bundled(), "H100"), 1)
    c = step_models.bundled("sglang").coefficients
    assert shape.graph_max_batch == NO_GRAPH_LIMIT
    free = step_us(shape.totals(40.0, 40_000.0, 40_000.0, 40.0), c)
    shape.graph_max_batch = 32
    over = step_us(shape.totals(40.0, 40_000.0, 40_000.0, 40.0), c)
    under = step_us(shape.totals(32.0, 32_000.0, 32_000.0, 32.0), c)
    assert over - free == pytest.approx(32 * c.graph_layer_us)  # 32 layers
    assert under == pytest.approx(step_us(shape.totals(32.0, 32_000.0, 32_000.0, 32.0), c))
    shape.graph_max_batch = NO_GRAPH_LIMIT
    assert under == pytest.approx(step_us(shape.totals(32.0, 32_000.0, 32_000.0, 32.0), c))


def test_a_scenarios_limit_slows_the_steps_over_it():
    default, compiled = run(), run(graph_max_batch=32)
    big = default.steps["decode_requests"] > 32
    assert big.any()
    # The same schedule until the first step over 32; every such step longer by 32 layers.
    assert compiled.summary["itl_mean_ms"] > default.summary["itl_mean_ms"]
    assert run(graph_max_batch=1000).summary == default.summary  # under 160 either way


def test_the_limit_is_the_physical_models_and_a_whole_number():
    with pytest.raises(ScenarioError, match="graph_max_batch"):
        blis_simpy.run({**SCENARIO, "latency": {"type": "roofline", "graph_max_batch": 8}})
    data = {"family": "x", "coefficients": step_models.bundled("vllm").coefficients.as_dict(),
            "graph_max_batch": 1.5}
    with pytest.raises(ValueError, match="graph_max_batch"):
        step_models.CoefficientSet.from_json(data, "x.json")


def test_a_file_without_the_term_has_none_and_takes_its_familys_limit(tmp_path: Path):
    c = step_models.bundled("vllm").coefficients.as_dict()
    del c["graph_layer_us"]
    for family, limit in (("sglang", 160), ("vllm", 512), ("my-own-server", None)):
        path = tmp_path / f"{family}.json"
        path.write_text(json.dumps({"family": family, "coefficients": c}), encoding="utf-8")
        loaded = step_models.load(str(path))
        assert loaded.coefficients.graph_layer_us == 0.0
        assert loaded.graph_max_batch == limit


def test_a_users_runs_take_their_servers_limit_from_the_command_line(tmp_path: Path):
    """`validate-real` and `calibrate --graph-max-batch N`: the inputs' stages carry it, the
    bundled sets keep their own."""
    from blis_simpy.observe.commands import _stages

    data = json.loads((data_dir() / "ground_truth" / "rtx4090-mistral-vllm.json").read_text(
        encoding="utf-8"))
    data["set"] = "mine"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    stages = _stages([path], "auto", None, "H100", 1, "vllm", "", bundled=True,
                     graph_max_batch=32)
    mine = [s for s in stages if s.set == "mine"]
    assert mine and all(s.engine["graph_max_batch"] == 32 for s in mine)
    datacrunch = [s for s in stages if s.set == "datacrunch-h200-sglang"]
    assert datacrunch and all(s.engine["graph_max_batch"] == 32 for s in datacrunch)
    training = [s for s in stages if s.set == "inference-sim-training"]
    assert training and all("graph_max_batch" not in s.engine for s in training)
    plain = _stages([path], "auto", None, "H100", 1, "vllm", "", bundled=False)
    assert all("graph_max_batch" not in s.engine for s in plain)
