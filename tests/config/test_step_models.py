"""The physical step model as native mode's default: which model a scenario runs, the shipped
coefficient sets and the format a calibrated file must have, works out of the box for every
bundled model on every bundled GPU, the catalog's KV sizes checked against GPU memory, and
every run's outputs naming its step model, its coefficients' source and documented accuracy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from blis_simpy.config import catalog, hardware, step_models
from blis_simpy.config.memory import model_weight_bytes
from blis_simpy.config.resolve import kv_catalog_note, resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.run import run
from tests.conftest import merge

LLAMA70 = "meta-llama/llama-3.3-70b-instruct"


def scenario(**changes: Any) -> Scenario:
    data = {"version": 1, "model": {"name": "meta-llama/llama-3.1-8b-instruct"},
            "workload": {"type": "distribution", "num_requests": 20, "rate_per_s": 5}}
    return Scenario.from_dict(merge(data, changes))


@pytest.mark.parametrize("changes, expected", [
    ({}, "physical"),
    ({"latency": {"alpha": [1, 2, 3], "beta": [4, 5, 6]}}, "blackbox"),
    ({"latency": {"beta": [4, 5, 6]}}, "blackbox"),
    ({"latency": {"type": "roofline"}}, "roofline"),
    ({"compat": "blis", "workload": {"arrival": "constant"}}, "blackbox"),
])
def test_which_step_model_a_scenario_runs(changes, expected):
    assert resolve(scenario(**changes)).latency.type == expected


def test_the_physical_model_is_native_only_and_takes_named_coefficients():
    with pytest.raises(ScenarioError, match="native"):
        resolve(scenario(compat="blis", latency={"type": "physical"},
                         workload={"arrival": "constant"}))
    with pytest.raises(ScenarioError, match=r"latency\.beta"):
        scenario(latency={"type": "physical", "beta": [1, 2, 3]})
    with pytest.raises(ScenarioError, match=r"latency\.coefficients"):
        resolve(scenario(latency={"coefficients": "vllm", "beta": [1, 2, 3]}))
    with pytest.raises(ScenarioError, match="bundled: sglang, vllm"):
        run(scenario(latency={"coefficients": "tgi"}))


def test_every_bundled_model_runs_out_of_the_box_on_every_bundled_gpu():
    configs = catalog.data_dir() / "model_configs"
    models = sorted(p.name for p in configs.iterdir() if (p / "config.json").is_file())
    assert {"llama-3.1-70b-instruct", "llama-3.3-70b-instruct", "qwen3-8b"} <= set(models)
    too_big = 0
    for gpu in hardware.bundled():
        eight = 8 * hardware.bundled_gpu(gpu).memory_mib * 2**20
        for model in models:
            weights = model_weight_bytes(catalog.bundled_model_config(model))
            chosen = scenario(model={"name": f"org/{model}", "gpu": gpu},
                              workload={"num_requests": 3})
            if weights > eight:  # Llama-3.1-405B in BF16 on 8 x H100: the run says so
                too_big += 1
                with pytest.raises(ScenarioError, match="does not fit"):
                    run(chosen)
                continue
            result = run(chosen)
            assert result.summary["completed_requests"] == 3, (model, gpu)
            assert result.summary["step_model"]["type"] == "physical"
    assert 0 < too_big < len(hardware.bundled())  # the 405B fits on 8 H200s only


def test_the_fewest_gpus_that_hold_the_weights_with_room_for_the_kv_cache():
    assert resolve(scenario()).model.tp == 2  # the catalog's default for Llama-3.1-8B
    assert resolve(scenario(model={"name": "org/qwen3-8b"})).model.tp == 1
    assert resolve(scenario(model={"name": "meta-llama/Llama-3.1-70B-Instruct"})).model.tp == 4
    big = resolve(scenario(model={"name": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "H200"}))
    assert big.model.tp == 2


def test_the_70b_tp4_catalog_entry_runs_with_what_fits_in_memory():
    """The catalog lists 128,273 KV blocks for Llama-3.3-70B on 4 H100s: four times what
    fits beside 141 GB of weights. vLLM measured 31,357 for Llama-2-70B TP 4, which has the
    same KV heads and layers. Native mode corrects it and warns; compat keeps it."""
    native = scenario(model={"name": LLAMA70}, latency={"type": "blackbox"})
    resolved = resolve(native)
    assert resolved.model.tp == 4 and resolved.model.gpu == "H100"
    assert abs(resolved.engine.kv_blocks - 30_000) <= 3_000
    assert abs(resolved.engine.kv_blocks - 31_357) / 31_357 < 0.05
    note = kv_catalog_note(resolved)
    assert note is not None and "128,273" in note and f"{resolved.engine.kv_blocks:,}" in note
    result = run(native)
    assert note in result.summary["warnings"]
    compat = resolve(scenario(model={"name": LLAMA70}, compat="blis",
                              workload={"arrival": "constant"}))
    assert compat.engine.kv_blocks == 128_273 and kv_catalog_note(compat) is None
    assert resolve(scenario(model={"name": LLAMA70})).engine.kv_blocks == \
        resolved.engine.kv_blocks  # the physical default sizes it from memory too


def test_every_catalog_entry_is_checked_against_memory():
    """Entries within 10 % of what fits are kept; those above are replaced and warned of."""
    rows = catalog.bundled().data["models"]
    corrected = kept = 0
    for row in rows:
        if row["GPU"] not in ("H100", "A100-80") or not row.get("total_kv_blocks"):
            continue
        sc = scenario(model={"name": row["id"], "gpu": row["GPU"],
                             "tp": row["tensor_parallelism"],
                             "vllm_version": row["vllm_version"]},
                      latency={"type": "blackbox"})
        try:
            resolved = resolve(sc)
        except ScenarioError:
            continue
        if kv_catalog_note(resolved):
            corrected += 1
            assert resolved.engine.kv_blocks < row["total_kv_blocks"]
        else:
            kept += 1
    assert corrected and kept


def test_outputs_name_the_step_model_its_source_and_accuracy():
    result = run(scenario())
    described = result.summary["step_model"]
    assert described["type"] == "physical" and described["coefficients"] == "vllm"
    assert described["source"] and described["accuracy"]
    assert "H100" in described["gpu"]
    blackbox = run(scenario(latency={"type": "blackbox"})).summary["step_model"]
    assert blackbox["type"] == "blackbox" and "defaults.yaml" in blackbox["source"]
    compat = run(scenario(compat="blis", workload={"arrival": "constant"}))
    assert "step_model" not in compat.summary  # compat writes the reference's summary


def test_a_gpu_the_step_model_has_no_measurements_on_is_warned():
    """Newcomer 19 #5: `model.gpu=L40S` ran on the fitted GPUs' mean multipliers, said only in
    summary.json step_model.gpu, with the fitted GPUs' accuracy quoted beside it."""
    warned = [w for w in run(scenario(model={"gpu": "L40S"})).summary["warnings"]
              if w.startswith("step model:")]
    assert warned == ["step model: no measurements on L40S in the vllm coefficients (fitted "
                      "on A100-SXM, H100, H200, RTX-4090): its kernel rates are the fitted "
                      "GPUs' mean, else the physics prior, and the accuracy quoted in "
                      "summary.json step_model was measured on those GPUs, not this one"]
    assert not any(w.startswith("step model:") for w in run(scenario()).summary["warnings"])
    text = run(scenario(model={"gpu": "L40S"})).summary_text()
    assert "- Step model: no measurements on L40S" in text
    blackbox = run(scenario(latency={"type": "blackbox"})).summary["warnings"]
    assert not any(w.startswith("step model:") for w in blackbox)


def test_shipped_sets_say_what_they_were_fitted_on_and_how_accurate_they_are():
    assert step_models.bundled_families() == ("sglang", "vllm")
    for family in step_models.bundled_families():
        shipped = step_models.bundled(family)
        assert shipped.family == family and shipped.source and shipped.accuracy
        fit = shipped.info["fit"]
        assert fit["stages"] and set(fit["identified"]) | set(fit["not_identified"])


def test_the_accuracy_a_shipped_set_claims_is_the_one_docs_accuracy_reports():
    """Every run's summary repeats the shipped set's accuracy: it must be the held-out figures
    of docs/accuracy.md (all sets, held out by set), not those of an earlier fit."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "accuracy.md").read_text()
    block = docs[docs.index("| all sets |"):]
    held_out = re.search(r"held out\*\* \(set\) \| (.+) \|", block)
    assert held_out is not None
    figures = re.findall(r"([0-9.]+) %", held_out.group(1))
    assert len(figures) == 4  # E2E, TPOT/ITL, TTFT, throughput past saturation
    for family in step_models.bundled_families():
        claimed = re.findall(r"([0-9.]+) %", step_models.bundled(family).accuracy)
        assert claimed[:4] == figures, family


@pytest.mark.parametrize("data, message", [
    ({"coefficients": {}}, "'family'"),
    ({"family": "vllm", "coefficients": {"weights": 1.0}}, "'step_us'"),
    ({"family": "vllm", "coefficients": {**step_models.bundled("vllm").coefficients.as_dict(),
                                         "magic": 1.0}}, "unknown coefficient 'magic'"),
    ({"family": "vllm", "coefficients": {**step_models.bundled("vllm").coefficients.as_dict(),
                                         "gemm": -1.0}}, "'gemm' must be a number"),
    ({"family": "vllm", "coefficients": step_models.bundled("vllm").coefficients.as_dict(),
      "gpus": {"H100": {"step_us": 5.0}}}, "kernel multipliers"),
])
def test_a_bad_coefficients_file_names_what_is_wrong(tmp_path: Path, data, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScenarioError, match=message):
        run(scenario(latency={"coefficients": str(path)}))
