"""The search commands of the command line (`blis-simpy sweep`), registered by `cli.py`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from blis_simpy.core.errors import ScenarioError
from blis_simpy.search.sweep import run_many
from blis_simpy.search.sweepfile import read_sweep


class SweepProgress:
    """`sweep: 12/40 runs, 3.1 runs/s, ETA 9 s` on stderr, rewritten in place."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        wall = time.perf_counter() - self.started
        rate = done / wall if wall > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        sys.stderr.write(f"\rsweep: {done}/{total} runs, {rate:.1f} runs/s, ETA {eta:.0f} s  ")
        sys.stderr.flush()
        if done == total:
            sys.stderr.write("\n")


def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="sweep YAML: scenarios, policies, seeds")],
    out: Annotated[Path | None, typer.Option(
        help="table to write (.csv or .parquet; default: the file's `out`)")] = None,
    workers: Annotated[int | None, typer.Option(
        min=1, help="worker processes (default: every core)")] = None,
    progress: Annotated[bool, typer.Option(
        "--progress/--quiet", help="progress bar on stderr")] = True,
) -> None:
    """Run every scenario x policy x seed of a sweep file on a process pool; write one row
    per run (ids, seed, every summary metric, fitness)."""
    try:
        spec = read_sweep(sweep_file)
        target = out or spec.out
        table = run_many(spec.scenarios, spec.policies, spec.seeds, workers=workers,
                         progress=SweepProgress() if progress else None)
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.suffix == ".parquet":
            table.to_parquet(target, index=False)
        else:
            table.to_csv(target, index=False)
    except (OSError, ImportError) as exc:
        typer.echo(f"error: cannot write {target}: {exc}", err=True)
        raise typer.Exit(2) from None
    means = table.groupby(["scenario", "policy"], sort=False, as_index=False)["fitness"].mean()
    for scenario, policy, fitness in means.itertuples(index=False):
        typer.echo(f"{scenario}  {policy}  mean fitness {fitness:.6g}", err=True)
    typer.echo(f"wrote {target} ({len(table)} runs)", err=True)


def register(app: typer.Typer) -> None:
    app.command()(sweep)
