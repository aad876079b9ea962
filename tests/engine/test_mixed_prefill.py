"""How a server family forms a step (engine/step.py, `Stepper.mixes_prefill`): vLLM mixes
prefill chunks into the decode steps; SGLang, unless started with --enable-mixed-chunk, runs a
step with prefill work as prefill only, every decode waiting for it. A property of the shipped
coefficient set (data/step_models/*.json `mixes_prefill`), native mode's physical model only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import blis_simpy
from blis_simpy.config import step_models
from blis_simpy.config.catalog import data_dir

# Requests of 2,000 prompt tokens and 200 output tokens, arriving while earlier ones decode; a
# 512-token budget cuts every prefill into four chunks.
SCENARIO = {"version": 1, "seed": 7,
            "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100", "tp": 1},
            "engine": {"max_running_requests": 64, "max_scheduled_tokens": 512},
            "workload": {"type": "distribution", "num_requests": 12, "rate_per_s": 8,
                         "prompt": {"mean": 2000, "stdev": 0, "min": 2000, "max": 2000},
                         "output": {"mean": 200, "stdev": 0, "min": 200, "max": 200}}}


def sglang_set(tmp_path: Path, mixes: bool) -> str:
    """The shipped SGLang set, its step formation set to `mixes`: the costs are the same."""
    data = json.loads((data_dir() / "step_models" / "sglang.json").read_text(encoding="utf-8"))
    data["mixes_prefill"] = mixes
    path = tmp_path / f"sglang-mixes-{mixes}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def run(coefficients: str):
    return blis_simpy.run({**SCENARIO, "latency": {"type": "physical",
                                                   "coefficients": coefficients}})


def test_the_shipped_sets_say_how_their_server_forms_a_step():
    assert step_models.bundled("vllm").mixes_prefill
    assert not step_models.bundled("sglang").mixes_prefill
    assert step_models.mixes_prefill("sglang") is False
    assert step_models.mixes_prefill("my-own-server") is True  # not shipped: vLLM's way


def test_under_sglang_decodes_stall_behind_a_prefill_and_under_vllm_they_do_not(tmp_path):
    apart, mixed = run(sglang_set(tmp_path, False)), run(sglang_set(tmp_path, True))
    prefill = apart.steps["prefill_tokens"] > 0
    assert prefill.any() and (apart.steps["decode_requests"] > 0).any()
    # Not mixed: no step both prefills and decodes, though requests were decoding meanwhile.
    assert not (apart.steps[prefill]["decode_requests"] > 0).any()
    both = (mixed.steps["prefill_tokens"] > 0) & (mixed.steps["decode_requests"] > 0)
    assert both.any()
    # Every decode waits out the prefill steps (9.98 against 9.17 ms a token), the prefills
    # do not share their steps (TTFT 212 against 221 ms).
    assert apart.summary["itl_mean_ms"] > 1.05 * mixed.summary["itl_mean_ms"]
    assert apart.summary["e2e_mean_ms"] > mixed.summary["e2e_mean_ms"]
    assert apart.summary["ttft_mean_ms"] < mixed.summary["ttft_mean_ms"]
    # The same requests in both, every one served.
    assert len(apart.requests) == len(mixed.requests) == 12
    # And the shipped vLLM set mixes, as the mixed SGLang one does.
    vllm = run("vllm").steps
    assert ((vllm["prefill_tokens"] > 0) & (vllm["decode_requests"] > 0)).any()


def test_a_file_that_does_not_say_forms_its_familys_steps(tmp_path):
    c = step_models.bundled("vllm").coefficients.as_dict()
    for family, mixes in (("sglang", False), ("vllm", True), ("my-own-server", True)):
        path = tmp_path / f"{family}.json"
        path.write_text(json.dumps({"family": family, "coefficients": c}), encoding="utf-8")
        assert step_models.load(str(path)).mixes_prefill is mixes


def test_a_set_must_say_true_or_false():
    data = {"family": "x", "coefficients": step_models.bundled("vllm").coefficients.as_dict(),
            "mixes_prefill": "no"}
    with pytest.raises(ValueError, match="mixes_prefill"):
        step_models.CoefficientSet.from_json(data, "x.json")
