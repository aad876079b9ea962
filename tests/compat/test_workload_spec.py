"""Converting the reference's `--workload-spec` YAML into a tenants workload
(compat/workload_spec.py), alone and through `convert blis-command`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import yaml

from blis_simpy.api import run
from blis_simpy.compat.convert import blis_command, to_yaml
from blis_simpy.compat.workload_spec import workload_spec
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TenantsWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.sample import sample_requests
from blis_simpy.workload.imported import workload_yaml
from tests.conftest import merge
from tests.workload_helpers import (
    LLAMA,
    WORKLOAD,
    assert_usage_error,
    cli,
    run_quickly,
    scenario_dict,
    write_yaml,
)


def test_prefix_affinity_demo_converts_and_runs():
    converted = workload_spec(WORKLOAD / "prefix-affinity-demo.yaml")
    w = converted.workload
    assert (w["rate_per_s"], w["max_requests"], converted.seed) == (500.0, 200, 42)
    assert w["duration_s"] >= 200 / 500  # num_requests only: the cap ends the arrivals
    a, b = w["tenants"]
    assert (a["id"], a["slo_class"], a["rate_fraction"]) == ("tenant-A", "interactive", 0.8)
    assert a["prompt"] == {"type": "gaussian", "mean": 64.0, "stdev": 20.0, "min": 16.0,
                           "max": 256.0}
    assert a["output"] == {"type": "exponential", "mean": 128.0}
    assert a["prefix"] == {"groups": ["long-system-prompt"], "reuse_probability": 1.0}
    assert "prefix" not in b and b["id"] == "tenant-B"
    assert w["prefix_groups"] == [{"id": "long-system-prompt",
                                   "length": {"type": "constant", "value": 256}}]
    requests = sample_requests(Scenario.from_dict(scenario_dict({**w, "max_requests": 40})))
    shared = [t[:256] for r, t in requests if r.tenant_id == "tenant-A"]
    assert len(shared) > 10 and all(np.array_equal(s, shared[0]) for s in shared)
    run_quickly(w)


def test_multiturn_chat_demo_becomes_chat_sessions():
    w = workload_spec(WORKLOAD / "multiturn-chat-demo.yaml").workload
    (tenant,) = w["tenants"]
    assert tenant["request_type"] == "chat"
    assert tenant["chat"] == {"turns": {"type": "constant", "value": 5.0},
                              "think_time_s": {"type": "constant", "value": 0.5},
                              "context_growth": "linear"}
    # Few sessions, so the cap does not stop them after their first turn.
    small = {**w, "rate_per_s": 5.0, "duration_s": 1.0}
    requests = sample_requests(Scenario.from_dict(scenario_dict(small)))
    assert max(r.turn for r, _ in requests) == 4
    run_quickly(small, max_requests=100)


def test_servegen_language_converts_and_drops_network():
    converted = workload_spec(WORKLOAD / "servegen-language.yaml")
    a, b = converted.workload["tenants"]
    assert a["arrival"] == {"type": "gamma", "cv": 3.5}
    assert a["prompt"] == {"type": "pareto-lognormal", "alpha": 1.5, "xm": 50.0, "mu": 5.5,
                           "sigma": 1.2, "mix_weight": 0.3}
    assert b["arrival"] == {"type": "poisson"}
    # prefix_group without prefix_length: the reference's 50 tokens.
    assert converted.workload["prefix_groups"][0]["length"]["value"] == 50
    assert any("network is ignored" in n for n in converted.notes)
    run_quickly(converted.workload)


@pytest.mark.parametrize("name", ["prefix-affinity-demo", "multiturn-chat-demo",
                                  "servegen-language"])
def test_convert_workload_spec_cli_prints_a_loadable_section(name):
    result = cli("convert", "workload-spec", WORKLOAD / f"{name}.yaml")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# Converted from the reference BLIS workload spec")
    comments = [line for line in result.stdout.splitlines() if line.startswith("#")]
    # the header names the input's path, so where it wraps depends on the checkout's folder
    assert "random streams" in " ".join(line.lstrip("# ") for line in comments)
    assert all(len(line) <= 100 for line in comments)
    section = yaml.safe_load(result.stdout)["workload"]
    Scenario.from_dict(scenario_dict(section))


SPEC: dict[str, Any] = {
    "version": "1", "seed": 5, "aggregate_rate": 20.0, "horizon": 2_000_000,
    "clients": [{
        "id": "c", "tenant_id": "t", "slo_class": "batch", "rate_fraction": 1.0,
        "arrival": {"process": "weibull", "cv": 2.0},
        "input_distribution": {"type": "empirical", "params": {"10": 0.5, "20": 0.5,
                                                              "30": 0}},
        "output_distribution": {"type": "gaussian",
                                "params": {"mean": 5, "std_dev": 1, "min": 8, "max": 8.5}},
    }],
}


def test_spec_horizon_maps_to_duration_and_shapes_convert(tmp_path):
    converted = workload_spec(write_yaml(tmp_path / "w.yaml", SPEC))
    w = converted.workload
    assert w["duration_s"] == 2.0 and "max_requests" not in w
    assert converted.horizon_s == 2.0
    (tenant,) = w["tenants"]
    assert tenant["arrival"] == {"type": "weibull", "cv": 2.0}
    assert tenant["prompt"] == {"type": "empirical", "bins": {"10": 0.5, "20": 0.5}}
    assert tenant["output"] == {"type": "constant", "value": 8.0}  # int(min) == int(max)
    assert isinstance(Scenario.from_dict(scenario_dict(w)).workload, TenantsWorkload)
    text = workload_yaml(converted, "title")
    assert "horizon_s: 2" in text and "seed is 5" in text


def test_gamma_without_cv_or_beyond_10_is_poisson(tmp_path):
    for cv in (None, 12.0):
        arrival = {"process": "gamma"} if cv is None else {"process": "gamma", "cv": cv}
        spec = merge(SPEC, {"clients": [{**SPEC["clients"][0], "arrival": arrival}]})
        w = workload_spec(write_yaml(tmp_path / "w.yaml", spec)).workload
        assert w["tenants"][0]["arrival"] == {"type": "poisson"}


def client(**changes: Any) -> dict[str, Any]:
    return {**SPEC, "clients": [{**SPEC["clients"][0], **changes}]}


SPEC_ERRORS = {
    "servegen data": ({**SPEC, "clients": [], "servegen_data": {"path": "d"}}, "servegen_data"),
    "no clients": ({**SPEC, "clients": []}, "clients"),
    "multimodal": (client(multimodal={"text_distribution": {}}), "clients[0].multimodal"),
    # issue 35 item 8 for item 1: a client's LoRA adapter id is refused with what to write
    "lora adapter": (client(adapter="sql-lora"), "clients[0].adapter"),
    "lifecycle windows": (client(lifecycle={"windows": [{"start_us": 0, "end_us": 5}]}),
                          "clients[0].lifecycle.windows"),
    "distribution file": (client(input_distribution={"type": "empirical", "file": "x.csv"}),
                          "clients[0].input_distribution.file"),
    "unknown type": (client(input_distribution={"type": "constant", "params": {}}),
                     "clients[0].input_distribution.type"),
    "unknown param": (client(output_distribution={"type": "exponential",
                                                  "params": {"means": 3}}),
                      "clients[0].output_distribution.params.means"),
    "unknown key": (client(priority=3), "clients[0].priority"),
    "unknown top key": ({**SPEC, "rate": 3}, "rate"),
    "process": (client(arrival={"process": "constant"}), "clients[0].arrival.process"),
    "weibull cv": (client(arrival={"process": "weibull", "cv": 20}), "clients[0].arrival.cv"),
    "growth": (client(reasoning={"multi_turn": {"max_rounds": 2, "context_growth": "none"}}),
               "clients[0].reasoning.multi_turn.context_growth"),
    "no window": ({**SPEC, "horizon": 0}, "num_requests"),
    "rate": ({**SPEC, "aggregate_rate": 0}, "aggregate_rate"),
    "bad schema value": (client(output_distribution={"type": "exponential",
                                                     "params": {"mean": -1}}),
                         "clients[0].output_distribution.params.mean"),
}


@pytest.mark.parametrize("spec, key", SPEC_ERRORS.values(), ids=SPEC_ERRORS)
def test_bad_or_unsupported_spec_exits_2_naming_the_key(tmp_path, spec, key):
    path = write_yaml(tmp_path / "w.yaml", spec)
    with pytest.raises(ScenarioError) as err:
        workload_spec(path)
    assert err.value.path == f"{path}: {key}"
    assert_usage_error(cli("convert", "workload-spec", path), key)


def test_unreadable_spec_exits_2(tmp_path):
    assert_usage_error(cli("convert", "workload-spec", tmp_path / "none.yaml"), "cannot read")
    (tmp_path / "bad.yaml").write_text("a: [1\n")
    assert_usage_error(cli("convert", "workload-spec", tmp_path / "bad.yaml"), "not valid YAML")


# ---------------------------------------------------------------- blis-command --workload-spec


def test_blis_command_embeds_the_workload_spec():
    spec = str(WORKLOAD / "multiturn-chat-demo.yaml")
    data = blis_command(["run", "--model", LLAMA, "--workload-spec", spec])
    assert data["compat"] == "blis" and data["seed"] == 42  # the spec's seed
    assert data["workload"]["type"] == "tenants" and data["workload"]["max_requests"] == 500
    override = blis_command(["run", "--model", LLAMA, "--workload-spec", spec, "--seed", "7",
                             "--num-requests", "20", "--horizon", "3000000"])
    assert override["seed"] == 7 and override["horizon_s"] == 3.0
    assert override["workload"]["max_requests"] == 20
    assert override["workload"]["duration_s"] == 3.0
    text = to_yaml(override)
    assert "RNG stream is not" in text
    result = run(Scenario.from_yaml_text(text))
    assert result.summary["completed_requests"] == 20


def test_blis_command_takes_the_spec_horizon(tmp_path):
    path = write_yaml(tmp_path / "w.yaml", SPEC)
    data = blis_command(["run", "--model", LLAMA, "--workload-spec", str(path)])
    assert data["horizon_s"] == 2.0 and data["seed"] == 5


def test_blis_command_spec_error_names_the_flag(tmp_path):
    path = write_yaml(tmp_path / "w.yaml", client(multimodal={}))
    result = cli("convert", "blis-command", "--", "run", "--model", LLAMA,
                 "--workload-spec", path)
    assert_usage_error(result, "--workload-spec: clients[0].multimodal")

