"""Streaming runs: the records written to the output folder as the run goes (docs/scale.md).

`records: auto` (the default) streams a run expected to have at least STREAM_FROM requests
into its output folder and keeps a smaller one in memory, which is faster there; `memory`
and `stream` choose. A run streams only into an output folder (the command line's, or
`simulate(..., folder=...)`), and only what can be streamed: the features below keep records
that are read whole at the end, so such a run stays in memory (and `stream` names why).
"""

from __future__ import annotations

from blis_simpy.config.workload import TenantsWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.metrics.anomalies import anomaly_table
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.event_records import kv_transfer_table, preemption_table
from blis_simpy.metrics.faults import fault_summary, fault_table
from blis_simpy.metrics.stream import StreamingRecords
from blis_simpy.sim.build import Progress, Simulation
from blis_simpy.sim.output import OutputFolder
from blis_simpy.sim.result import Result

RECORDS = ("auto", "memory", "stream")
STREAM_FROM = 1_000_000  # requests: below, a run in memory is faster (docs/scale.md)
FIELD = "--records"


def unstreamable(sim: Simulation) -> str | None:
    """Why the run's records cannot be streamed, if they cannot."""
    scenario = sim.scenario
    if scenario.compat == "blis":
        return "compat: blis writes the reference's results.json, one row per request"
    if sim.recorder.decisions is not None or sim.recorder.events is not None:
        return "a decision trace (cluster.trace_level decisions or full) keeps every decision"
    if scenario.deployment is not None:
        return "a deployment section (replica pools, autoscaling, P/D) reads every request"
    if scenario.engine.kv_tiers.enabled:
        return "KV tiers keep a record per tier operation"
    if scenario.engine.lora is not None:
        return "the per-adapter metrics (engine.lora) read every request"
    if scenario.cluster.flow_control is not None:
        return "the gateway queue's summary (cluster.flow_control) reads every request"
    return None


def expected_requests(sim: Simulation) -> int | None:
    """How many requests the workload will send: a synthetic one's count, a trace's rows, a
    multi-tenant one's limit or its mean rate times its duration."""
    workload = sim.scenario.workload
    if sim.expected is None and isinstance(workload, TenantsWorkload):
        return round(workload.rate_per_s * workload.duration_s)
    return sim.expected


def streams(sim: Simulation, folder: OutputFolder | None, records: str) -> bool:
    """Whether the run streams its records into `folder` (checked before it runs)."""
    if records not in RECORDS:
        raise ScenarioError(FIELD, f"unknown records mode {records!r}", ", ".join(RECORDS))
    if records == "memory":
        return False
    reason = unstreamable(sim)
    if records == "stream":
        if folder is None:
            raise ScenarioError(FIELD, "a streaming run writes its records into its output "
                                "folder, and none was given", "an output folder (out=...)")
        if reason is not None:
            raise ScenarioError(FIELD, f"this run cannot stream its records: {reason}",
                                "records auto or memory")
        return True
    expected = expected_requests(sim)
    return (folder is not None and reason is None and expected is not None
            and expected >= STREAM_FROM)


def simulate_streaming(sim: Simulation, folder: OutputFolder,
                       progress: Progress | None = None) -> Result:
    """Run with the records streamed into the folder's staging copy; the Result's requests
    and steps tables are those files (read when asked for)."""
    sink = StreamingRecords(folder.staging, folder.format, sim.scenario, sim.conventions,
                            sim.trace_times)
    sim.recorder.stream(sink)
    try:
        wall = sim.run(progress)
        records = sim.records()
        summary, metrics, evaluation, anomalies = sink.finish(records, wall, sim.input_notes)
        faults = None
        if records.faults or sim.scenario.faults is not None:  # small: kept in memory
            sums = sink.step_sums()
            summary["faults"] = fault_summary(records, sim.scale_log.lifecycle,
                                              sums.new + sums.decodes)
            faults = fault_table(records.faults)
        speculative = sim.scenario.engine.speculative
        if speculative is not None:  # the instances' totals: the in-memory run's section
            from blis_simpy.metrics.speculation import speculation_summary

            summary["speculation"] = speculation_summary(records, speculative)
    finally:
        sink.close()
    return Result(scenario=sim.scenario, summary=summary, request_table=Table({}),
                  step_table=Table({}), wall_time_s=wall, metrics=metrics,
                  evaluation=evaluation, anomaly_table=anomaly_table(anomalies),
                  fault_table=faults, preemption_table=preemption_table(records),
                  kv_transfer_table=kv_transfer_table(records), streamed=folder)
