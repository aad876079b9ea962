"""Small disaggregated (P/D) scenarios for the cluster, metrics and property tests."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from blis_simpy.config.scenario import Scenario
from blis_simpy.engine.kv.checked import check_ownership
from blis_simpy.sim.build import Simulation
from blis_simpy.sim.result import Result
from blis_simpy.sim.run import prepare, simulate

MODEL = "meta-llama/llama-3.1-8b-instruct"


def pd_scenario(*, prefill: int = 1, decode: int = 1, rate: float = 20.0, requests: int = 40,
                prompt: int = 1024, output: int = 32, kv_blocks: int = 2048,
                decode_kv_blocks: int | None = None, seed: int = 7,
                pd: dict[str, Any] | None = None, timeout_s: float | None = None,
                max_running: int = 16, kv_tiers: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """One model served by one disaggregated config of `prefill` and `decode` fixed replicas;
    a distribution workload of `requests` requests around `prompt` and `output` tokens."""
    section: dict[str, Any] = {
        "prefill": {"replicas": {"min": prefill, "max": prefill}},
        "decode": {"replicas": {"min": decode, "max": decode}},
        **(pd or {}),
    }
    if decode_kv_blocks is not None:
        section["decode"] = {**section["decode"],
                             "engine": {"max_running_requests": max_running,
                                        "kv_blocks": decode_kv_blocks}}
    workload: dict[str, Any] = {
        "type": "distribution", "num_requests": requests, "rate_per_s": rate,
        "prompt": {"mean": prompt, "stdev": prompt // 4, "min": 16, "max": 2 * prompt},
        "output": {"mean": output, "stdev": output // 2, "min": 1, "max": 4 * output}}
    if timeout_s is not None:
        workload["timeout_s"] = timeout_s
    if kv_tiers is not None and decode_kv_blocks is not None:
        section["decode"]["engine"]["kv_tiers"] = kv_tiers
    engine: dict[str, Any] = {"max_running_requests": max_running, "kv_blocks": kv_blocks}
    if kv_tiers is not None:
        engine["kv_tiers"] = kv_tiers
    return {
        "version": 1, "name": "pd-test", "seed": seed,
        "model": {"name": MODEL, "gpu": "H100", "tp": 1},
        "latency": {"type": "blackbox"},  # the catalog's coefficients: what these tests pin
        "engine": engine,
        "workload": workload,
        "deployment": {"models": [{"name": MODEL, "configs": [{
            "id": "pd", "architecture": "disaggregated_pd", "pd": section}]}]},
    }


def checking(sim: Simulation, every_us: int = 500) -> None:
    """Check single ownership of every KV block across the fleet every `every_us` as well
    (the run's own checks do it at every handoff event and after every block operation)."""
    def watch() -> Generator[simpy.Event, object, None]:
        while True:
            yield sim.env.timeout(every_us)
            check_ownership(list(sim.fleet))
            if sim.env.peek() == float("inf"):  # nothing else can happen
                return
    sim.env.process(watch())


def run_pd(data: dict[str, Any], *, watch: bool = False, **kwargs: Any
           ) -> tuple[Result, Simulation]:
    sim = prepare(Scenario.from_dict(data), checks=True, **kwargs)
    if watch:
        checking(sim)
    return simulate(sim), sim
