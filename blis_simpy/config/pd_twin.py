"""The monolithic twin of a disaggregated scenario: the same model, GPUs and workload, each
disaggregated_pd config replaced by a monolithic config of as many replicas as its two pools
together. The P/D-vs-monolithic comparison (DistServe's question) is these two runs."""

from __future__ import annotations

import dataclasses

from blis_simpy.config.deployment import DeploymentConfig
from blis_simpy.config.replicas import ReplicaPool
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError


def monolithic_twin(scenario: Scenario) -> Scenario:
    """`scenario` with every disaggregated config made monolithic on the same GPUs."""
    section = scenario.deployment
    if section is None:
        return scenario
    models = [dataclasses.replace(model, configs=[twin(config) for config in model.configs])
              for model in section.models]
    return dataclasses.replace(scenario, deployment=dataclasses.replace(section,
                                                                        models=models))


def twin(config: DeploymentConfig) -> DeploymentConfig:
    pd = config.disaggregation
    if pd is None:
        return config
    prefill, decode = pd.prefill, pd.decode
    if (prefill.gpu, prefill.tp, prefill.latency, prefill.engine) != (
            decode.gpu, decode.tp, decode.latency, decode.engine):
        raise ScenarioError(f"deployment config {config.id}", "its pools differ in hardware "
                            "or engine: there is no monolithic pool of the same GPUs",
                            "pools with the same gpu, tp, latency and engine")
    a, b = prefill.replicas, decode.replicas
    replicas = ReplicaPool(min=a.min + b.min, max=a.max + b.max,
                           initial=None if a.initial is None and b.initial is None
                           else a.start + b.start)
    return dataclasses.replace(config, architecture="monolithic", pd=None, replicas=replicas)
