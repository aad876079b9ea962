"""Workload interchange: sampling a run to a trace CSV and replaying it, and converting the
reference's workload specs and inference-perf configs into tenants workloads."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.api import run
from blis_simpy.cli import app
from blis_simpy.compat.convert import blis_command, to_yaml
from blis_simpy.compat.workload_spec import workload_spec
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TenantsWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.sample import sample, sample_requests
from blis_simpy.workload import export
from blis_simpy.workload.export import EXTRA_COLUMNS, REFERENCE_COLUMNS
from blis_simpy.workload.imported import workload_yaml
from blis_simpy.workload.inference_perf import inference_perf
from tests.conftest import BASE, DATA, merge

WORKLOAD = DATA / "workload"
RUNNER = CliRunner()
LLAMA = "meta-llama/llama-3.1-8b-instruct"

TENANTS: dict[str, Any] = {
    "type": "tenants", "rate_per_s": 20, "duration_s": 2,
    "tenants": [
        {"id": "chat", "slo_class": "interactive", "request_type": "chat",
         "chat": {"turns": {"type": "constant", "value": 3},
                  "think_time_s": {"type": "constant", "value": 0.2}},
         "prompt": {"type": "gaussian", "mean": 50, "stdev": 10, "min": 5, "max": 100},
         "output": {"type": "gaussian", "mean": 20, "stdev": 5, "min": 1, "max": 40}},
        # Shorter than one KV block (16 tokens): the engine re-hashes these on admission.
        {"id": "tiny,batch", "slo_class": "batch", "rate_fraction": 0.5,
         "prompt": {"type": "constant", "value": 3}, "output": {"type": "constant", "value": 1}},
    ],
}


def scenario_dict(workload: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The shared test scenario around a workload section."""
    data = merge(BASE, {"cluster": {"instances": 2}, **changes})
    data["workload"] = workload
    return data


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: Any):
    return RUNNER.invoke(app, [str(a) for a in args])


def assert_usage_error(result, *needles: str) -> None:
    """Exit 2, one `error:` line naming the problem, no traceback, nothing on stdout."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def read_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


# ---------------------------------------------------------------- workload sample


def test_sample_writes_reference_columns_then_tenant_columns(tmp_path):
    scenario = write_yaml(tmp_path / "s.yaml", scenario_dict(TENANTS))
    out = tmp_path / "trace.csv"
    result = cli("workload", "sample", scenario, "--out", out)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert tuple(rows[0]) == REFERENCE_COLUMNS + EXTRA_COLUMNS
    expected = sample_requests(Scenario.from_dict(scenario_dict(TENANTS)))
    assert len(rows) - 1 == len(expected) > 20
    assert {len(r) for r in rows} == {10}
    arrivals = [float(r[0]) for r in rows[1:]]
    assert arrivals == sorted(arrivals)
    assert all(len(r[0].partition(".")[2]) == 6 for r in rows[1:])
    for row, (req, tokens) in zip(rows[1:], expected, strict=True):
        assert row[1] == req.name and row[2] == LLAMA
        assert len(eval_list(row[3])) == req.input_len and len(eval_list(row[4])) == req.output_len
        assert eval_list(row[3]) + eval_list(row[4]) == tokens.tolist()
    chat = [r for r in rows[1:] if r[5] == "chat"]
    assert {r[8] for r in chat} == {"0", "1", "2"} and all(r[7] and r[9] == "chat" for r in chat)
    tiny = [r for r in rows[1:] if r[5] == "tiny,batch"]
    assert tiny and all(r[6] == "batch" and r[9] == "completion" for r in tiny)
    text = out.read_text()
    assert '"[' in text and ',"tiny,batch",' in text  # token lists and commas quoted


def eval_list(text: str) -> list[int]:
    assert text.startswith("[") and " " not in text
    return [int(t) for t in text[1:-1].split(",") if t]


def test_sample_replays_through_a_trace_workload(tmp_path):
    """Session turns arrive when earlier responses complete; the trace freezes those times."""
    original = sample_requests(Scenario.from_dict(scenario_dict(TENANTS)))
    out = tmp_path / "sampled.csv"
    sample(Scenario.from_dict(scenario_dict(TENANTS)), out)
    replay = Scenario.from_dict(scenario_dict({"type": "trace", "path": "sampled.csv"}),
                                tmp_path)
    replayed = sample_requests(replay)
    assert len(replayed) == len(original)
    for (a, a_tokens), (b, b_tokens) in zip(original, replayed, strict=True):
        assert (a.arrival, a.input_len, a.output_len) == (b.arrival, b.input_len, b.output_len)
        assert np.array_equal(a_tokens, b_tokens)


def test_sample_seed_and_set_change_the_run(tmp_path):
    scenario = write_yaml(tmp_path / "s.yaml", scenario_dict(TENANTS))
    outs = [tmp_path / f"{i}.csv" for i in range(3)]
    assert cli("workload", "sample", scenario, "--out", outs[0]).exit_code == 0
    assert cli("workload", "sample", scenario, "--out", outs[1], "--seed", "99").exit_code == 0
    result = cli("workload", "sample", scenario, "--out", outs[2],
                 "--set", "workload.duration_s=0.5")
    assert result.exit_code == 0, result.output
    assert outs[0].read_text() != outs[1].read_text()
    assert len(read_rows(outs[2])) < len(read_rows(outs[0]))


def test_sample_failure_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "trace.csv"
    out.write_text("old\n")
    calls = []

    def failing(req, tokens, model):
        calls.append(req)
        if len(calls) > 3:
            raise RuntimeError("boom")
        return "x\n"

    monkeypatch.setattr(export, "trace_line", failing)
    with pytest.raises(RuntimeError):
        sample(Scenario.from_dict(scenario_dict(TENANTS)), out)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.csv"]


@pytest.mark.parametrize("change, needles", [
    ({"out": "missing/trace.csv"}, ("--out", "does not exist")),
    ({"out": "."}, ("--out", "is a folder")),
    ({"set": "workload.rate_per_s=-1"}, ("workload.rate_per_s",)),
])
def test_sample_bad_input_exits_2(tmp_path, monkeypatch, change, needles):
    monkeypatch.chdir(tmp_path)
    scenario = write_yaml(tmp_path / "s.yaml", scenario_dict(TENANTS))
    args = ["workload", "sample", scenario, "--out", change.get("out", "t.csv")]
    if "set" in change:
        args += ["--set", change["set"]]
    assert_usage_error(cli(*args), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_sample_missing_scenario_exits_2(tmp_path):
    assert_usage_error(cli("workload", "sample", tmp_path / "nope.yaml", "--out",
                           tmp_path / "t.csv"), "cannot read")


# ---------------------------------------------------------------- reference workload specs


def run_quickly(workload: dict[str, Any], max_requests: int = 30) -> Any:
    """Load the converted section in a minimal scenario and run a few requests of it."""
    small = {**workload, "max_requests": max_requests}
    result = run(Scenario.from_dict(scenario_dict(small)))
    assert result.summary["completed_requests"] > 0
    return result


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
    assert "random streams" in result.stdout
    assert all(len(line) <= 100 for line in result.stdout.splitlines() if line.startswith("#"))
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


# ---------------------------------------------------------------- inference-perf


def test_inference_perf_stages_become_a_step_profile():
    converted = inference_perf(WORKLOAD / "inference-perf-synthetic.yaml")
    w = converted.workload
    assert (w["rate_per_s"], w["duration_s"], converted.seed) == (10.0, 10.0, 1234)
    assert w["load_profile"] == {"type": "step", "steps": [
        {"at_s": 0.0, "multiplier": 0.4}, {"at_s": 5.0, "multiplier": 1.0}]}
    (tenant,) = w["tenants"]
    assert tenant["arrival"] == {"type": "constant"}
    assert tenant["prompt"] == {"type": "gaussian", "mean": 200.0, "stdev": 60.0,
                                "min": 10.0, "max": 400.0}
    requests = sample_requests(Scenario.from_dict(scenario_dict(w)))
    first = sum(r.arrival < 5_000_000 for r, _ in requests)
    assert (first, len(requests) - first) == (20, 50)  # 4/s then 10/s, evenly spaced
    run_quickly(w)


def test_inference_perf_shared_prefix_becomes_prefix_groups():
    w = inference_perf(WORKLOAD / "inference-perf-shared-prefix.yaml").workload
    assert [g["id"] for g in w["prefix_groups"]] == [f"group-{i}" for i in range(4)]
    assert all(g["length"] == {"type": "constant", "value": 256.0} for g in w["prefix_groups"])
    (tenant,) = w["tenants"]
    assert tenant["arrival"] == {"type": "poisson"}
    assert tenant["prompt"] == {"type": "constant", "value": 40.0}
    requests = sample_requests(Scenario.from_dict(scenario_dict(w)))
    prefixes = {tuple(t[:256].tolist()) for _, t in requests}
    assert all(r.input_len == 296 for r, _ in requests)
    assert 1 < len(prefixes) <= 4
    run_quickly(w)


def test_convert_inference_perf_cli_prints_a_loadable_section():
    result = cli("convert", "inference-perf", WORKLOAD / "inference-perf-shared-prefix.yaml")
    assert result.exit_code == 0, result.output
    assert "&id" not in result.stdout  # no YAML anchors
    Scenario.from_dict(scenario_dict(yaml.safe_load(result.stdout)["workload"]))


IP: dict[str, Any] = {
    "load": {"type": "poisson", "stages": [{"rate": 2, "duration": 3}]},
    "data": {"type": "random", "input_distribution": {"mean": 100, "std_dev": 10},
             "output_distribution": {"type": "fixed", "mean": 20.7}},
}


def test_inference_perf_distribution_shapes(tmp_path):
    config = merge(IP, {"data": {"input_distribution": {"type": "uniform", "min": 5,
                                                        "max": 50},
                                 "output_distribution": {"type": "lognormal", "min": 0,
                                                         "mean": 30, "std_dev": 30}}})
    w = inference_perf(write_yaml(tmp_path / "ip.yaml", config)).workload
    tenant = w["tenants"][0]
    assert tenant["prompt"]["type"] == "uniform" and tenant["prompt"]["low"] == 5.0
    assert tenant["output"]["type"] == "lognormal" and tenant["output"]["mean"] == 30.0
    plain = inference_perf(write_yaml(tmp_path / "ip2.yaml", IP)).workload
    assert plain["tenants"][0]["output"]["value"] == 20.0  # int(mean), as inference-perf
    assert plain["tenants"][0]["prompt"]["max"] == 1024.0  # inference-perf's default bounds
    assert "load_profile" not in plain


IP_ERRORS = {
    "concurrent": (merge(IP, {"load": {"type": "concurrent"}}), "load.type"),
    "sweep": (merge(IP, {"load": {"sweep": {"type": "linear"}}}), "load.sweep"),
    "no stages": (merge(IP, {"load": {"stages": []}}), "load.stages"),
    "stage concurrency": (merge(IP, {"load": {"stages": [{"rate": 1, "duration": 1,
                                                          "concurrency_level": 4}]}}),
                          "load.stages[0].concurrency_level"),
    "dataset": (merge(IP, {"data": {"type": "shareGPT"}}), "data.type"),
    "mock": ({"load": IP["load"]}, "data.type"),
    "missing lengths": (merge(IP, {"data": {"input_distribution": None}}),
                        "data.input_distribution"),
    "shifted lognormal": (merge(IP, {"data": {"input_distribution": {"type": "lognormal"}}}),
                          "data.input_distribution.type"),
    "multi-turn": ({"load": IP["load"], "data": {
        "type": "shared_prefix", "shared_prefix": {"enable_multi_turn_chat": True}}},
        "data.shared_prefix.enable_multi_turn_chat"),
    "unknown data key": (merge(IP, {"data": {"lengths": 3}}), "data.lengths"),
}


@pytest.mark.parametrize("config, key", IP_ERRORS.values(), ids=IP_ERRORS)
def test_unsupported_inference_perf_exits_2_naming_the_key(tmp_path, config, key):
    path = write_yaml(tmp_path / "ip.yaml", config)
    with pytest.raises(ScenarioError) as err:
        inference_perf(path)
    assert err.value.path == f"{path}: {key}"
    assert_usage_error(cli("convert", "inference-perf", path), key)
