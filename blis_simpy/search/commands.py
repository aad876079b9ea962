"""The search commands of the command line (`blis-simpy sweep`, `gepa-evaluate`,
`openevolve-evaluate`), registered by `cli.py`. Each imports the search layer when it runs,
so the other commands' start-up does not pay for it."""

# No `from __future__ import annotations`: typer reads these signatures on every start of the
# command line (cli.py says why).
import importlib.util
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

from blis_simpy.config.library import scenario_file
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text, replacing


class SweepProgress:
    """`sweep: 12/40 runs, 3.1 runs/s, ETA 9 s` and a bar on stderr (core/status.py); the
    rate counts the runs done here, not those a resumed sweep found in its store, which the
    last line names (finalcheck 20: a resumed sweep read 981 runs/s)."""

    def __init__(self) -> None:
        from blis_simpy.core.status import StatusLine

        self.started = time.perf_counter()
        self.status = StatusLine()
        self.stored: int | None = None  # (the first call's count: before any run)

    def __call__(self, done: int, total: int) -> None:
        if self.stored is None:
            self.stored = done
        wall = time.perf_counter() - self.started
        rate = (done - self.stored) / wall if wall > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        stored = f" ({self.stored} from the store)" if self.stored else ""
        text = f"sweep: {done}/{total} runs{stored}, {rate:.1f} runs/s, ETA {eta:.0f} s"
        if done == total:
            self.status.note(text)
            self.status.close()
        else:
            self.status.show(text, done, total)


def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="sweep YAML: scenarios, policies, seeds")],
    out: Annotated[Path | None, typer.Option(
        help="table to write (.csv or .parquet; default: the file's `out`)")] = None,
    workers: Annotated[int | None, typer.Option(
        min=1, help="worker processes (default: every core)")] = None,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--quiet", help="progress bar on stderr (default: when it is a terminal)")
    ] = None,
    force: Annotated[bool, typer.Option(help="replace an existing table")] = False,
    store: Annotated[Path | None, typer.Option(
        help="run store: each finished run is kept there at once, and a sweep started again "
        "skips the runs it holds (default: the file's `store`, else the table's name with "
        ".runs.sqlite)")] = None,
) -> None:
    """Run every scenario x policy x seed of a sweep file on a process pool; write one row
    per run (ids, seed, every summary metric, fitness). Every finished run is stored at
    once, so a sweep that was killed resumes where it stopped when started again."""
    from blis_simpy.search.sweep import run_many
    from blis_simpy.search.sweepfile import read_sweep

    try:
        spec = read_sweep(sweep_file)
        target = out or spec.out
        check_table_target(target, force)
        runs = store or spec.store or target.with_suffix(".runs.sqlite")
        show = sys.stderr.isatty() if progress is None else progress
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", UserWarning)
            table = run_many(spec.scenarios, spec.policies, spec.seeds, workers=workers,
                             progress=SweepProgress() if show else None, store=runs)
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for note in notes:
        typer.echo(f"note: {note.message}", err=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # the table is rebuilt from the run store each time: a resumed sweep rewrites it
        with replacing(target, f"out ({target})", "a .csv or .parquet file",
                       force=True) as temp:
            if target.suffix == ".parquet":
                table.to_parquet(temp, index=False)
            else:
                table.to_csv(temp, index=False)
    except OSError as exc:
        typer.echo(f"error: cannot write {target}: {exc}", err=True)
        raise typer.Exit(2) from None
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for line in pair_lines(table):
        typer.echo(line, err=True)
    typer.echo(f"wrote {target} ({len(table)} runs)", err=True)


def pair_lines(table: Any) -> list[str]:
    """Each (scenario, policy) pair's mean fitness, and how many of its runs were saturated
    (the `saturated` column): a mean over drowning runs ranks policies by how they drown."""
    lines = []
    for (scenario, policy), runs in table.groupby(["scenario", "policy"], sort=False):
        line = f"{scenario}  {policy}  mean fitness {runs['fitness'].mean():.6g}"
        if "saturated" in runs:
            saturated = int(runs["saturated"].fillna(False).astype(bool).sum())
            if saturated:
                line += f"  ({saturated} of {len(runs)} runs saturated)"
        lines.append(line)
    return lines


def check_table_target(target: Path, force: bool) -> None:
    """Before any run: the table's format is known, its writer installed, and its place
    writable, so a long sweep never ends in an error that loses its rows."""
    where = f"out ({target})"
    if target.suffix not in (".csv", ".parquet"):
        raise ScenarioError(where, f"unknown table format {target.suffix or '(none)'!r}",
                            ".csv or .parquet")
    if target.suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ScenarioError(where, "Parquet needs pyarrow", "pip install 'blis-simpy[parquet]'")
    if target.is_dir():
        raise ScenarioError(where, "is a directory", "a file name ending .csv or .parquet")
    if target.exists() and not target.is_file():
        raise ScenarioError(where, "is not a regular file (a device or FIFO is never replaced)",
                            "a file name ending .csv or .parquet")
    if target.exists() and not force:
        raise ScenarioError(where, "exists", "--force to replace it, or another name")
    parent = next((p for p in (target.parent, *target.parent.parents) if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ScenarioError(where, f"cannot be created: {parent} is not a writable folder")


def components(policy_config: Path | None, code: list[str] | None) -> dict[str, str]:
    """The candidate's named text components from the command line's files."""
    from blis_simpy.policies.bundle import AXES
    from blis_simpy.search.code import BUNDLE

    out: dict[str, str] = {}
    if policy_config is not None:
        out[BUNDLE] = read_text(policy_config, "--policy-config", "a policy bundle YAML file")
    for item in code or []:
        axis, sep, path = item.partition("=")
        if not sep:
            raise ScenarioError("--code", f"{item!r} has no '='", "AXIS=file.py")
        if axis not in AXES:
            raise ScenarioError("--code", f"{axis!r} is not a policy axis", ", ".join(AXES))
        source = read_text(path, "--code", "a Python source file")
        if "\0" in source:  # Python's own words would be "line None: ... null bytes"
            raise ScenarioError(f"--code {path}", f"a NUL byte at character "
                                f"{source.index(chr(0)):,}: not Python source text")
        out[axis] = source
    return out


def gepa_evaluate(
    workload: Annotated[list[Path], typer.Option(
        help="scenario YAML or library name to evaluate on (repeatable)")],
    policy_config: Annotated[Path | None, typer.Option(help="policy bundle YAML")] = None,
    code: Annotated[list[str] | None, typer.Option(
        help="code policy for one axis: routing=policy.py")] = None,
    seed: Annotated[list[int] | None, typer.Option(
        help="seeds (repeatable; default: each scenario's own)")] = None,
    fitness_weights: Annotated[str | None, typer.Option(
        help='objective weights, e.g. "mean_ttft:1,throughput:0.5" (default: the '
        "scenario's fitness section)")] = None,
) -> None:
    """Evaluate one candidate as GEPA's adapter does: print its score (mean fitness) and
    per-run feedback as JSON. A candidate that fails scores 0 with the reason."""
    from blis_simpy.config.fitness import parse_weights
    from blis_simpy.search.code import candidate_policy
    from blis_simpy.search.contain import SandboxUnavailable
    from blis_simpy.search.sweep import check_inputs, checked_seeds, run_many
    from blis_simpy.sim.run import load as load_scenario

    try:  # the user's inputs: a bad one is refused here, never scored as the candidate's
        seeds = checked_seeds("--seed", seed)
        weights = {} if fitness_weights is None else {
            "fitness.weights": parse_weights(fitness_weights)}
        scenarios = {f"{i}:{path}": load_scenario(
            scenario_file(str(path), Path.cwd(), f"--workload[{i}]"), overrides=weights)
            for i, path in enumerate(workload)}
        check_inputs(scenarios)
        candidate = components(policy_config, code)
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        policy = candidate_policy(candidate)
        table = run_many(scenarios, {"candidate": policy}, seeds, workers=1)
        runs = table.to_dict("records")
    except SandboxUnavailable as exc:  # not the candidate's fault: refuse, never score
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ScenarioError as exc:
        runs = [{"scenario": name, "fitness": 0.0, "error": str(exc),
                 "feedback": f"the candidate scored 0: {exc}"} for name in scenarios]
    scores = [float(r["fitness"]) for r in runs]
    typer.echo(json.dumps({
        "score": sum(scores) / len(scores), "scores": scores,
        "feedback": [r["feedback"] for r in runs],
        "runs": [{k: plain(v) for k, v in r.items() if k != "feedback"} for r in runs],
    }, indent=2))


def plain(value: Any) -> Any:
    """JSON has no NaN: a missing statistic is null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def openevolve_evaluate(
    program: Annotated[Path, typer.Argument(help="evolved program: code policy (.py) or "
                                            "policy bundle (.yaml)")],
    workload: Annotated[list[Path], typer.Option(
        help="scenario YAML or library name to evaluate on (repeatable)")],
    axis: Annotated[str, typer.Option(help="the axis a code policy implements")] = "routing",
    seed: Annotated[list[int] | None, typer.Option(
        help="seeds (repeatable; default: each scenario's own)")] = None,
    stage1: Annotated[bool, typer.Option(
        "--stage1", help="only the cascade's first stage (first scenario, first seed)")
    ] = False,
) -> None:
    """Evaluate a program as the OpenEvolve evaluator does; print its metrics and artifacts
    as JSON (needs `pip install 'blis-simpy\\[search]'`)."""
    try:
        from blis_simpy.search.openevolve_evaluator import BlisEvaluator
    except ImportError as exc:
        typer.echo(f"error: {exc}; install the search extra: pip install "
                   "'blis-simpy[search]'", err=True)
        raise typer.Exit(2) from None
    try:
        paths = [scenario_file(str(p), Path.cwd(), f"--workload[{i}]")
                 for i, p in enumerate(workload)]
        blis = BlisEvaluator(paths, axis=axis, seeds=seed)
        blis.candidate(program)  # a path the user mistyped is refused; the evaluator scores 0
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        result = (blis.evaluate_stage1 if stage1 else blis.evaluate)(str(program))
    except ScenarioError as exc:  # the sandbox cannot start: refuse, never score
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps({"metrics": result.metrics, "artifacts": result.artifacts},
                          indent=2))


def register(app: typer.Typer) -> None:
    app.command()(sweep)
    app.command("gepa-evaluate")(gepa_evaluate)
    app.command("openevolve-evaluate")(openevolve_evaluate)
