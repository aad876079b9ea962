"""Several models behind one gateway (issue 13): each request goes only to its model's
instances (by its trace row's model, else its tenant's, else the default model); a model no
deployment serves is a clear error; metrics come per model and per config."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from blis_simpy.api import prepare
from blis_simpy.cluster.fleet import Fleet, ModelFleets
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from tests.cluster.autoscale_helpers import run, scenario

SMALL = "qwen/qwen2.5-7b-instruct"


def two_models() -> dict:
    data = scenario({"type": "oscillator"}, rate=30, duration=10, interval=1.0,
                    actuation={"drain": {"policy": "immediate"}})
    data["workload"]["tenants"].append({**copy.deepcopy(data["workload"]["tenants"][0]),
                                        "id": "batch"})
    data["deployment"]["models"].append({
        "name": SMALL, "tenants": ["batch"], "configs": [
            {"id": "qwen-a", "gpu": "A100-80", "tp": 1, "cost_per_replica_hour": 1.0,
             "replicas": {"min": 1, "max": 2, "initial": 1}},
            {"id": "qwen-b", "gpu": "H100", "tp": 1, "cost_per_replica_hour": 2.0,
             "replicas": {"min": 1, "max": 2, "initial": 2}}]})
    return data


def test_requests_go_only_to_their_models_instances():
    result = run(two_models(), checks=True)
    deployment = result.summary["deployment"]
    replicas = result.replicas
    served: dict[str, set[str]] = {}
    for instance, tenant in zip(result.requests.instance, result.requests.tenant, strict=True):
        served.setdefault(tenant, set()).add(instance)
    chat, batch = served["app"], served["batch"]
    assert chat and batch and not chat & batch
    assert set(result.requests.final_state) == {"completed"}
    assert set(replicas.config) == {"pool", "qwen-a", "qwen-b"}
    models = deployment["models"]
    assert models[SMALL]["configs"] == ["qwen-a", "qwen-b"]
    assert models[SMALL]["requests"] + models["meta-llama/llama-3.1-8b-instruct"][
        "requests"] == len(result.requests)
    assert deployment["cost"] == pytest.approx(sum(c["cost"] for c in
                                                   deployment["configs"].values()))


def test_every_config_is_scaled_on_its_own():
    events = run(two_models()).scale_events
    assert set(events.config) == {"pool", "qwen-a", "qwen-b"}


def test_a_model_no_deployment_serves_is_a_clear_error():
    fleets = ModelFleets({"a/x": Fleet(), "b/y": Fleet()}, {"t": "b/y"}, "a/x")
    req = Request(0, 0, np.arange(4), np.arange(2), "t")
    assert fleets.model_of(req) == "b/y"
    req.model = "A/X"
    assert fleets.model_of(req) == "a/x"
    req.model = "c/z"
    with pytest.raises(ScenarioError, match="names model 'c/z', which no deployment serves"):
        fleets.model_of(req)


def test_a_deployment_tenant_missing_from_the_workload_is_refused():
    data = two_models()
    data["deployment"]["models"][1]["tenants"] = ["nobody"]
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    assert err.value.path == "deployment.models[1].tenants"


BURSTGPT = Path(__file__).resolve().parents[2] / "scenarios" / "data" / "burstgpt-sample.csv"
COEFFS = {"type": "blackbox", "alpha": [100.0, 1.0, 100.0], "beta": [5000.0, 10.0, 50.0]}


def trace_models(*names: str) -> dict:
    return {
        "version": 1, "name": "trace-models", "model": {"name": names[0]},
        "latency": COEFFS,
        "workload": {"type": "trace", "path": str(BURSTGPT)},
        "deployment": {"models": [{"name": name, "configs": [{"id": f"c{i}"}]}
                                  for i, name in enumerate(names)]},
    }


def test_trace_rows_go_to_the_model_they_name():
    requests = run(trace_models("ChatGPT", "GPT-4")).requests
    by_model = requests.groupby("model").instance.unique()
    assert set(by_model["ChatGPT"]) == {"instance_0"}
    assert set(by_model["GPT-4"]) == {"instance_1"}


def test_a_trace_naming_an_unserved_model_fails_before_the_run():
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(trace_models("ChatGPT", "llama")))
    assert err.value.path == "workload.path" and "'GPT-4'" in str(err.value)
