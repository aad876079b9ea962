"""What a run returns: the summary, DataFrames, and the files the CLI writes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from blis_simpy.compat.results import ReferenceOutputs
from blis_simpy.config.scenario import Scenario
from blis_simpy.metrics.fitness import EvaluationResult
from blis_simpy.metrics.tables import group_table


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

    def to_csv(self, out_dir: str | Path) -> list[Path]:
        return self.save(out_dir, "csv")

    def to_parquet(self, out_dir: str | Path) -> list[Path]:
        return self.save(out_dir, "parquet")

    def save(self, out_dir: str | Path, tables: str = "auto") -> list[Path]:
        """Write every output into `out_dir`, atomically: files appear only when all are done."""
        out = Path(out_dir)
        fmt = table_format(tables)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            (staging / "summary.json").write_text(self.summary_json())
            (staging / "scenario.yaml").write_text(self.scenario.to_yaml())
            write_table(self.requests, staging / f"requests.{fmt}")
            write_table(self.steps, staging / f"steps.{fmt}")
            (staging / "metrics.json").write_text(json.dumps(self.metrics, indent=2) + "\n")
            if self.evaluation is not None:
                (staging / "evaluation.json").write_text(
                    json.dumps(self.evaluation.to_file_dict(), indent=2) + "\n")
            for name in ("anomalies", "instances"):
                table = getattr(self, name)
                if table is not None:
                    write_table(table, staging / f"{name}.{fmt}")
            if self.decisions is not None:
                write_table(self.decisions, staging / f"decisions.{fmt}")
            for name, text in self.extra_files.items():
                (staging / name).write_text(text)
            out.mkdir(exist_ok=True)
            written = []
            for item in sorted(staging.iterdir()):
                target = out / item.name
                os.replace(item, target)
                written.append(target)
            return written
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def table_format(tables: str) -> str:
    if tables == "auto":
        try:
            import pyarrow  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            return "csv"
        return "parquet"
    return tables


def write_table(frame: pd.DataFrame, path: Path) -> None:
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False, lineterminator="\n")
