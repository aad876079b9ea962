"""What a run returns: the summary, DataFrames, and the files the CLI writes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from blis_simpy.compat.results import ReferenceOutputs
from blis_simpy.config.scenario import Scenario
from blis_simpy.metrics.fitness import EvaluationResult
from blis_simpy.metrics.tables import group_table
from blis_simpy.sim.output import OutputFolder


@dataclass(frozen=True)
class Result:
    """One simulation's outcome. Small and picklable: plain values and DataFrames."""

    scenario: Scenario  # resolved: every default made explicit
    summary: dict[str, Any]
    requests: pd.DataFrame
    steps: pd.DataFrame
    wall_time_s: float
    metrics: dict[str, Any] = field(default_factory=dict)  # RawMetrics (README: Evaluation)
    evaluation: EvaluationResult | None = None
    anomalies: pd.DataFrame | None = None  # one row per anomaly occurrence
    instances: pd.DataFrame | None = None  # per-instance levels over time
    decisions: pd.DataFrame | None = None  # when cluster.record_decisions is on
    reference: ReferenceOutputs | None = None  # compat mode: the reference's own outputs
    # (time µs, kind, subject, where) in the order they happened, when the recorder kept them
    events: tuple[tuple[int, str, str, str], ...] | None = None

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
            out_dir, tables, force)
        return folder.commit(self.write_files)

    def write_files(self, folder: Path, fmt: str) -> None:
        (folder / "summary.json").write_text(self.summary_json())
        (folder / "scenario.yaml").write_text(self.scenario.to_yaml())
        write_table(self.requests, folder / f"requests.{fmt}")
        write_table(self.steps, folder / f"steps.{fmt}")
        (folder / "metrics.json").write_text(json.dumps(self.metrics, indent=2) + "\n")
        if self.evaluation is not None:
            (folder / "evaluation.json").write_text(
                json.dumps(self.evaluation.to_file_dict(), indent=2) + "\n")
        for name in ("anomalies", "instances", "decisions"):
            table = getattr(self, name)
            if table is not None:
                write_table(table, folder / f"{name}.{fmt}")
        for name, text in self.extra_files.items():
            (folder / name).write_text(text)


def write_table(frame: pd.DataFrame, path: Path) -> None:
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False, lineterminator="\n")
