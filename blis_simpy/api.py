"""The Python API: `run(scenario) -> Result`, the same line the CLI follows."""

from __future__ import annotations

from pathlib import Path

from blis_simpy.compat import blis as blis_output
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.engine.simulation import Progress, Simulation
from blis_simpy.metrics.collect import StepTable
from blis_simpy.metrics.evaluation import evaluate, instance_series
from blis_simpy.metrics.raw import anomaly_table
from blis_simpy.metrics.report import (
    decision_table,
    latencies,
    request_table,
    step_table,
    summary,
)
from blis_simpy.result import Result


def load(scenario: Scenario | str | Path) -> Scenario:
    return scenario if isinstance(scenario, Scenario) else Scenario.from_yaml(scenario)


def prepare(scenario: Scenario | str | Path) -> Simulation:
    """Resolve and build a simulation; every input error (including a bad trace) surfaces
    here, before any event runs."""
    return Simulation(resolve(load(scenario)))


def run(scenario: Scenario | str | Path, progress: Progress | None = None) -> Result:
    """Simulate a scenario (object or YAML path) and return its Result."""
    return simulate(prepare(scenario), progress)


def simulate(sim: Simulation, progress: Progress | None = None) -> Result:
    """Run a prepared simulation to its end and collect the Result."""
    resolved = sim.scenario
    wall = sim.run(progress)
    compat = resolved.compat == "blis"
    steps = [StepTable.of(inst) for inst in sim.instances]
    lat = latencies(sim, steps, compat)
    stats = summary(sim, steps, lat, compat)
    reference = None
    if compat:
        names = [inst.name for inst in sim.instances]
        reference = blis_output.ReferenceOutputs.of(stats, lat, names)
    requests = request_table(sim, lat)
    metrics, evaluation = evaluate(sim, steps, requests, stats, wall)
    return Result(
        scenario=resolved,
        summary=stats,
        requests=requests,
        steps=step_table(sim, steps),
        decisions=decision_table(sim) if resolved.cluster.record_decisions else None,
        wall_time_s=wall,
        metrics=metrics,
        evaluation=evaluation,
        anomalies=anomaly_table(sim.anomalies),
        instances=instance_series(sim, steps),
        reference=reference,
    )
