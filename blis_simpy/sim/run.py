"""Run a scenario and build its Result from the records: the same line the CLI follows."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blis_simpy.config.library import scenario_file
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario, one_seed, with_overrides
from blis_simpy.config.step_models import describe as step_model_of
from blis_simpy.config.step_models import outside_fit
from blis_simpy.core.arguments import callback, flag, instance
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder, Records
from blis_simpy.metrics.anomalies import anomaly_table
from blis_simpy.metrics.conventions import step_durations
from blis_simpy.metrics.evaluation import evaluate
from blis_simpy.metrics.event_records import kv_transfer_table, preemption_table
from blis_simpy.metrics.faults import computed_tokens, fault_summary, fault_table
from blis_simpy.metrics.pd import disaggregated, pd_summary, queue_depth_table, transfer_table
from blis_simpy.metrics.saturation import run_saturation
from blis_simpy.metrics.tables import (
    instance_series,
    request_table,
    step_table,
    summary,
)
from blis_simpy.metrics.trace.decisions import DecisionRows
from blis_simpy.metrics.trace.regret import prefill_ms_per_token
from blis_simpy.metrics.warnings import run_warnings
from blis_simpy.metrics.window import Window
from blis_simpy.sim.background import Background
from blis_simpy.sim.build import Progress, Simulation, build
from blis_simpy.sim.output import OutputFolder
from blis_simpy.sim.result import Result
from blis_simpy.sim.stream import simulate_streaming, streams

if TYPE_CHECKING:
    from blis_simpy.compat.results import ReferenceOutputs
    from blis_simpy.metrics.conventions import RequestLatencies

PROGRESS = "a function taking a RunProgress (now_us, arrived, finished, ...), or None"


ScenarioForm = Scenario | str | Path | Mapping[str, Any]


def load(scenario: ScenarioForm, *, seed: int | None = None,
         overrides: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario, in any of its forms: a `Scenario`, a YAML file's path, a library name
    (`blis-simpy scenarios`), or a mapping as the YAML would give it (a trace path in it is
    relative to the current folder); with `seed` and dotted `overrides`
    ({"policies.routing.type": "least-loaded"}) applied, validated as thoroughly as a file (an
    object built or changed in Python, e.g. with `dataclasses.replace`, skipped the loader's
    checks). A file's folder is where its `module:Class` policies are looked for, after the
    Python path."""
    if isinstance(scenario, str | Path):
        path = scenario_file(scenario, where="scenario")
        loaded = Scenario.from_yaml(path, overrides)
        policy_folder(loaded, path.parent)
        data = loaded.to_dict()
    elif isinstance(scenario, Scenario):
        data = with_overrides(scenario.to_dict(), overrides)
    elif isinstance(scenario, Mapping):
        data = with_overrides(dict(scenario), overrides)
        data.setdefault("name", "scenario")
    else:
        raise ScenarioError("scenario", f"got {type(scenario).__name__}", "a Scenario, a "
                            "YAML file's path, a library scenario's name, or a mapping of "
                            "its sections")
    if seed is not None:
        one_seed(seed, overrides, "seed", "an override")
        data["seed"] = seed
    return Scenario.from_dict(data)


def policy_folder(scenario: Scenario, folder: Path) -> None:
    """Let the scenario's `module:Class` policies be found next to its file, as the command
    line does: the folder is searched after the installed packages (never shadowing them)."""
    sections = scenario.to_dict()
    types = [p.get("type", "") for p in sections.get("policies", {}).values()]
    autoscaler = (sections.get("deployment") or {}).get("autoscaler") or {}
    types.append((autoscaler.get("policy") or {}).get("type", ""))
    if any(":" in t for t in types) and str(folder.resolve()) not in sys.path:
        sys.path.append(str(folder.resolve()))


def prepare(scenario: ScenarioForm, *, seed: int | None = None,
            overrides: Mapping[str, Any] | None = None, recorder: Recorder | None = None,
            checks: bool = False) -> Simulation:
    """Resolve and build a simulation; every input error (including a bad trace) surfaces
    here, before any event runs."""
    recorder = instance("recorder", recorder, (Recorder, type(None)),
                        "a Recorder (blis_simpy.Recorder(events=True)) or None")
    checks = flag("checks", checks)
    return build(resolve(load(scenario, seed=seed, overrides=overrides)), recorder=recorder,
                 checks=checks)


def run(scenario: ScenarioForm, progress: Progress | None = None, *,
        seed: int | None = None, overrides: Mapping[str, Any] | None = None,
        recorder: Recorder | None = None, checks: bool = False) -> Result:
    """Simulate a scenario (any form `load` takes), optionally with another seed and dotted
    overrides, and return its Result."""
    callback("progress", progress, PROGRESS)
    return simulate(prepare(scenario, seed=seed, overrides=overrides, recorder=recorder,
                            checks=checks), progress)


def simulate(sim: Simulation, progress: Progress | None = None, *,
             folder: OutputFolder | None = None, record_mode: str = "auto",
             series: bool = True) -> Result:
    """Run a prepared simulation to its end and build the Result from its records. With an
    output `folder` (to `save` the Result into), `record_mode` chooses whether they are kept
    in memory or streamed into the folder as the run goes: auto, memory or stream
    (sim/stream.py). `series=False` leaves out the instances' levels over time
    (`instance_table` None): a sweep's row never reads them."""
    instance("sim", sim, Simulation, "a Simulation, from prepare()")
    folder = instance("folder", folder, (OutputFolder, type(None)),
                      "an OutputFolder (blis_simpy.sim.output.OutputFolder(path)) or None")
    progress = callback("progress", progress, PROGRESS)
    if streams(sim, folder, record_mode):
        assert folder is not None
        return simulate_streaming(sim, folder, progress)
    wall = sim.run(progress)
    records = sim.records()
    levels = Background(lambda: instance_series(records), "instance-series") if series \
        else None
    scenario, conventions = sim.scenario, sim.conventions
    lat = conventions.latencies(records.requests, step_durations(records.instances))
    window = Window.of(scenario.evaluation.window)
    stats = summary(records, lat, conventions, scenario.horizon_us, window)
    stats["saturation"] = run_saturation(records, window, scenario)
    stats["warnings"] = (run_warnings(stats, set(records.requests.tenant),
                                      set(records.requests.slo_class), scenario,
                                      len(records.requests))
                         + sim.input_notes)
    if not sim.mode.reference_reporting:  # compat writes the reference's summary only
        stats["step_model"] = step_model_of(scenario)
        stats["warnings"].extend(outside_fit(scenario))
    requests = request_table(records.requests, lat, sim.trace_times)
    scale_log, scale_tables, placements = sim.scale_log, None, None
    if scenario.deployment is not None:  # (its metrics imported only then)
        from blis_simpy.metrics.scaling import (
            deployment_summary,
            replica_table,
            scale_event_table,
        )

        stats["deployment"] = deployment_summary(scale_log, records.ended_at, scenario,
                                                 requests)
        scale_tables = scale_event_table(scale_log), replica_table(scale_log, scenario)
        section = scenario.deployment
        if section.node_pools:  # placement on node pools
            from blis_simpy.metrics.placement import (
                config_pools,
                node_pool_summary,
                placement_table,
                with_placement,
            )

            stats["deployment"]["node_pools"] = node_pool_summary(
                scale_log, section.node_pools, records.ended_at)
            scale_tables = scale_tables[0], with_placement(
                scale_tables[1], scale_log, section.node_pools, config_pools(section))
            placements = placement_table(scale_log)
    faults = None
    if records.faults or scenario.faults is not None:
        stats["faults"] = fault_summary(records, scale_log.lifecycle,
                                       computed_tokens(records))
        faults = fault_table(records.faults)
    flow = scenario.cluster.flow_control
    if flow is not None:  # the gateway queue's bands (metrics imported only then)
        from blis_simpy.metrics.flow import gateway_queue_summary

        stats["gateway_queue"] = gateway_queue_summary(records, requests, flow,
                                                       scenario.cluster.routing_latency_us)
    adapter_loads = None
    if scenario.engine.lora is not None:  # LoRA adapters (metrics imported only then)
        from blis_simpy.metrics.adapters import adapter_load_table, adapter_summary

        requests.columns["adapter"] = records.requests.adapter
        stats["adapters"] = adapter_summary(records, requests)
        adapter_loads = adapter_load_table(records.adapter_loads)
    if scenario.engine.speculative is not None:  # speculative decoding's counts
        from blis_simpy.metrics.speculation import speculation_summary

        stats["speculation"] = speculation_summary(records, scenario.engine.speculative)
    pd_tables = None
    if disaggregated(records):
        stats["pd"] = pd_summary(records, requests)
        pd_tables = transfer_table(records), queue_depth_table(records)
    metrics, evaluation, anomalies = evaluate(records, scenario, requests, stats, conventions,
                                              wall, window, scale_log)
    steps, anomaly_rows = step_table(records), anomaly_table(anomalies)
    decisions = None
    if records.decisions is not None:
        decisions = DecisionRows(records.decisions, requests, scenario.cluster.top_k,
                                 prefill_ms_per_token(steps.array("prefill_tokens"),
                                                      steps.array("decode_requests"),
                                                      steps.array("duration_ms") * 1000))
    decision_table = None if decisions is None else decisions.table()
    formats = scenario.outputs.trace_formats
    trace_files = {}
    if "jsonl" in formats:
        trace_files["decisions.jsonl"] = "" if decisions is None else decisions.jsonl()
    if "perfetto" in formats:
        from blis_simpy.metrics.trace.perfetto import perfetto_json

        trace_files["trace.json"] = perfetto_json([i.id for i in records.instances], requests,
                                                   steps, anomaly_rows, decision_table)
    return Result(
        scenario=scenario,
        summary=stats,
        request_table=requests,
        step_table=steps,
        decision_table=decision_table,
        wall_time_s=wall,
        metrics=metrics,
        evaluation=evaluation,
        anomaly_table=anomaly_rows,
        instance_table=None if levels is None else levels.result(),
        trace_files=trace_files,
        reference=reference_outputs(stats, lat, records) if sim.mode.reference_reporting
        else None,
        events=records.events,
        scale_event_table=None if scale_tables is None else scale_tables[0],
        replica_table=None if scale_tables is None else scale_tables[1],
        transfer_table=None if pd_tables is None else pd_tables[0],
        transfer_queue_table=None if pd_tables is None else pd_tables[1],
        fault_table=faults,
        placement_table=placements,
        preemption_table=preemption_table(records),
        kv_transfer_table=kv_transfer_table(records),
        adapter_load_table=adapter_loads,
    )


def reference_outputs(stats: dict[str, Any], lat: RequestLatencies,
                      records: Records) -> ReferenceOutputs:
    """The reference's own output files of a compat run; the writers are loaded only then."""
    from blis_simpy.compat.results import ReferenceOutputs

    return ReferenceOutputs.of(stats, lat, records.requests)
