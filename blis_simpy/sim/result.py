"""What a run returns: the summary, the tables (DataFrames on demand), and the files the CLI
writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blis_simpy.core.arguments import flag
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.fitness import EvaluationResult
from blis_simpy.metrics.tables import TEXT_COLUMNS, group_table
from blis_simpy.sim.background import Background
from blis_simpy.sim.output import OutputFolder

if TYPE_CHECKING:
    import pandas as pd

    from blis_simpy.compat.results import ReferenceOutputs
    from blis_simpy.config.scenario import Scenario
    from blis_simpy.metrics.trace.summary import TraceInputs


STREAMED = ("requests", "steps", "instances")  # the tables a streaming run writes itself


@dataclass(frozen=True, repr=False)
class Result:
    """One simulation's outcome. Small and picklable: plain values and column tables, each
    turned into a pandas DataFrame the first time it is read (`requests`, `steps`, ...), so a
    run that only writes files never imports pandas."""

    scenario: Scenario  # resolved: every default made explicit
    summary: dict[str, Any]
    request_table: Table
    step_table: Table
    wall_time_s: float
    metrics: dict[str, Any] = field(default_factory=dict)  # RawMetrics (docs/reference/metrics.md)
    evaluation: EvaluationResult | None = None
    anomaly_table: Table | None = None  # one row per anomaly occurrence
    instance_table: Table | None = None  # per-instance levels over time
    decision_table: Table | None = None  # when cluster.trace_level is decisions or full
    reference: ReferenceOutputs | None = None  # compat mode: the reference's own outputs
    # (time µs, kind, subject, where) in the order they happened, when the recorder kept them
    events: tuple[tuple[int, str, str, str], ...] | None = None
    # file name -> text of the trace exports `outputs.trace_formats` asked for
    trace_files: dict[str, str] = field(default_factory=dict)
    scale_event_table: Table | None = None  # with a deployment section: one row per action
    replica_table: Table | None = None  # ... and each config's replica count over time
    transfer_table: Table | None = None  # P/D: one row per KV handoff
    transfer_queue_table: Table | None = None  # P/D: handoffs waiting for the link over time
    fault_table: Table | None = None  # with failures: crashes, repairs, lost and retried requests
    placement_table: Table | None = None  # node pools: one row per replica placed
    preemption_table: Table | None = None  # one row per preemption
    kv_transfer_table: Table | None = None  # with KV tiers: one row per transfer between tiers
    adapter_load_table: Table | None = None  # LoRA: one row per adapter load
    # A streaming run's folder, which holds its requests, steps and instances tables
    # (sim/stream.py); request_table and step_table are then empty.
    streamed: OutputFolder | None = None

    @cached_property
    def faults(self) -> pd.DataFrame | None:
        """With failures: one row per crash, repair, slowdown, request lost, retried or
        failed (faults.csv)."""
        return None if self.fault_table is None else self.fault_table.frame()

    @cached_property
    def transfers(self) -> pd.DataFrame | None:
        """P/D: one row per KV handoff (transfers.csv)."""
        return None if self.transfer_table is None else self.transfer_table.frame()

    @cached_property
    def preemptions(self) -> pd.DataFrame | None:
        """One row per preemption (preemptions.csv)."""
        return None if self.preemption_table is None else self.preemption_table.frame()

    @cached_property
    def kv_transfers(self) -> pd.DataFrame | None:
        """With KV tiers: one row per transfer between tiers (kv_transfers.csv)."""
        return None if self.kv_transfer_table is None else self.kv_transfer_table.frame()

    @cached_property
    def placements(self) -> pd.DataFrame | None:
        """Node pools: one row per replica placed (placements.csv)."""
        return None if self.placement_table is None else self.placement_table.frame()

    @cached_property
    def adapter_loads(self) -> pd.DataFrame | None:
        """LoRA: one row per adapter load, and the adapter it evicted (adapter_loads.csv)."""
        return None if self.adapter_load_table is None else self.adapter_load_table.frame()

    @cached_property
    def scale_events(self) -> pd.DataFrame | None:
        """One row per scale action: time, config, action, from, to, reason, signals."""
        return None if self.scale_event_table is None else self.scale_event_table.frame()

    @cached_property
    def replicas(self) -> pd.DataFrame | None:
        """Each config's replica count after every lifecycle change."""
        return None if self.replica_table is None else self.replica_table.frame()

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request that arrived, in arrival order (requests.csv)."""
        return self.request_table.frame() if self.streamed is None else self.read("requests")

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per engine step and instance (steps.csv)."""
        return self.step_table.frame() if self.streamed is None else self.read("steps")

    def read(self, name: str) -> pd.DataFrame:
        """A streamed table, from the output folder (or its staging copy before it is
        saved)."""
        import pandas as pd

        assert self.streamed is not None
        path = self.streamed.location() / f"{name}.{self.streamed.format}"
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        header = pd.read_csv(path, nrows=0).columns
        text = [column for column in header if column in TEXT_COLUMNS]
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""],
                            dtype=dict.fromkeys(text, str))
        for column in text:  # an empty cell is an empty string, as in memory
            frame[column] = frame[column].fillna("")
        return frame

    @cached_property
    def anomalies(self) -> pd.DataFrame | None:
        return None if self.anomaly_table is None else self.anomaly_table.frame()

    @cached_property
    def instances(self) -> pd.DataFrame | None:
        if self.streamed is not None:
            return self.read("instances")
        return None if self.instance_table is None else self.instance_table.frame()

    @cached_property
    def decisions(self) -> pd.DataFrame | None:
        return None if self.decision_table is None else self.decision_table.frame()

    @property
    def extra_files(self) -> dict[str, str]:
        """File name -> text of the compat-mode outputs (results.json, blis_stdout.txt)."""
        return self.reference.files() if self.reference is not None else {}

    def by_tenant(self) -> pd.DataFrame:
        """One row per tenant: counts by outcome, latency statistics of its completed requests."""
        return group_table(self.requests, "tenant")

    def by_slo_class(self) -> pd.DataFrame:
        """One row per SLO class, as `by_tenant`."""
        return group_table(self.requests, "slo_class")

    def by_instance(self) -> pd.DataFrame:
        """One row per instance that requests were routed to, as `by_tenant`."""
        return group_table(self.requests[self.requests.instance != ""], "instance")

    @property
    def warnings(self) -> list[str]:
        """What makes this run degenerate (nothing arrived, nothing completed, ...); empty for
        a healthy run. Also in summary.json."""
        return list(self.summary["warnings"])

    def summary_text(self, max_tokens: int = 1000, strategy: str = "issue_focused") -> str:
        """A Markdown account of the run for a person or a reflecting LLM (GEPA, OpenEvolve):
        outcome against the SLO targets, key issues, counterfactuals, worst decisions and a
        suggested focus, at most about `max_tokens` tokens (4 characters each). `strategy`:
        issue_focused, decision_audit, counterfactual or pattern_mining. The same run always
        gives the same text. Decision sections need `cluster.trace_level: decisions`."""
        from blis_simpy.metrics.trace.summary import summary_text

        return summary_text(self.trace_inputs(), max_tokens, strategy)

    def trace_inputs(self) -> TraceInputs:
        from blis_simpy.metrics.trace.summary import TraceInputs

        # (the tables themselves: a DataFrame, and pandas, only for the decisions)
        requests = self.request_table if self.streamed is None else self.requests
        return TraceInputs.of(self.summary, self.metrics, requests, self.anomaly_table,
                              self.decision_table, self.scenario.to_dict())

    def __repr__(self) -> str:
        """A line a notebook can show: which run and its headline figures, not the tables."""
        s = self.summary
        return (f"<Result {self.scenario.name!r}: {s.get('completed_requests', 0)} of "
                f"{s.get('arrived_requests', s.get('injected_requests', 0))} requests completed, "
                f"TTFT p99 {s.get('ttft_p99_ms', 0.0):.1f} ms, E2E p99 "
                f"{s.get('e2e_p99_ms', 0.0):.1f} ms, {s.get('responses_per_sec', 0.0):.2f} req/s; "
                f"tables: .requests .steps .instances .anomalies; .summary; .save(folder)>")

    def summary_json(self) -> str:
        return json.dumps(self.summary, indent=2) + "\n"

    def to_csv(self, out_dir: str | Path, force: bool = False) -> list[Path]:
        return self.save(out_dir, "csv", force)

    def to_parquet(self, out_dir: str | Path, force: bool = False) -> list[Path]:
        return self.save(out_dir, "parquet", force)

    def save(self, out_dir: str | Path | OutputFolder, tables: str = "auto",
             force: bool = False) -> list[Path]:
        """Write every output into `out_dir`, which must be new or empty (or `force`: replaced
        whole); the folder appears only when every file is written."""
        folder = out_dir if isinstance(out_dir, OutputFolder) else OutputFolder(
            out_dir, tables, flag("force", force))
        return folder.commit(self.write_files)

    def write_files(self, folder: Path, fmt: str) -> None:
        streamed = STREAMED if self.streamed is not None else ()
        tables = [(table, folder / f"{name}.{fmt}") for name, table in (
            ("requests", self.request_table), ("steps", self.step_table),
            ("anomalies", self.anomaly_table), ("instances", self.instance_table),
            ("decisions", self.decision_table), ("scale_events", self.scale_event_table),
            ("replicas", self.replica_table), ("transfers", self.transfer_table),
            ("transfer_queue", self.transfer_queue_table), ("faults", self.fault_table),
            ("placements", self.placement_table), ("preemptions", self.preemption_table),
            ("kv_transfers", self.kv_transfer_table), ("adapter_loads", self.adapter_load_table))
            if table is not None and name not in streamed]
        write_tables(tables, meanwhile=lambda: self.write_texts(folder))

    def write_texts(self, folder: Path) -> None:
        """The summary, the scenario, the metrics and the other text files."""
        (folder / "summary.json").write_text(self.summary_json())
        (folder / "scenario.yaml").write_text(self.scenario.to_yaml())
        (folder / "metrics.json").write_text(json.dumps(self.metrics, indent=2) + "\n")
        if self.evaluation is not None:
            (folder / "evaluation.json").write_text(
                json.dumps(self.evaluation.to_file_dict(), indent=2) + "\n")
        if self.reference is not None:
            self.reference.write(folder)
        for name, text in self.trace_files.items():
            (folder / name).write_text(text)


def write_tables(tables: list[tuple[Table, Path]],
                 meanwhile: Callable[[], None] = lambda: None) -> None:
    """Each table to its file, two at a time (this thread and a `Background` one), the
    longest first: most of a long table's formatting is numpy work that lets the other thread
    run, so a long run's step and instance tables (a million rows each) take about a third
    less time than one after the other. `meanwhile` (the text files: a compat run's
    results.json, the scenario's YAML, mostly interpreted work) runs on this thread while the
    other starts on the longest table. A failure stops both threads after the file each is
    writing, and is raised once both are done (never while one still writes)."""
    todo = sorted(tables, key=lambda item: len(item[0]))  # popped from the end: longest first

    def work() -> None:
        while todo:
            try:
                table, path = todo.pop()
            except IndexError:  # the other thread took the last one
                return
            try:
                write_table(table, path)
            except BaseException:
                todo.clear()
                raise

    helper = Background(work, "write-tables")
    try:
        try:
            meanwhile()
        except BaseException:
            todo.clear()
            raise
        work()
    finally:
        helper.result()


def write_table(table: Table, path: Path) -> None:
    if path.suffix == ".parquet":
        table.frame().to_parquet(path, index=False)
    else:
        table.write_csv(path)
