"""The command line: a thin layer over the API that validates, runs and writes files.

Bad input exits with status 2 and one line on stderr naming what was wrong; nothing is written.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from blis_simpy.api import prepare, simulate
from blis_simpy.config.errors import ScenarioError
from blis_simpy.config.scenario import Scenario
from blis_simpy.engine.simulation import Simulation

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Simulate LLM inference serving: `blis-simpy run scenario.yaml`.",
)
convert_app = typer.Typer(no_args_is_help=True, help="Convert reference BLIS inputs to scenarios.")
app.add_typer(convert_app, name="convert")


def fail(exc: ScenarioError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def prepared(path: Path, seed: int | None = None, overrides: list[str] | None = None
             ) -> Simulation:
    """Load, apply overrides and build, so every input error surfaces before running."""
    scenario = Scenario.from_yaml(path, overrides or ())
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    return prepare(scenario)


class ProgressBar:
    """A one-line progress report on stderr, shown only after the run has taken a second."""

    def __init__(self, total: int | None, horizon_us: int | None) -> None:
        self.total, self.horizon = total, horizon_us
        self.shown = False

    def __call__(self, now_us: int, arrived: int, wall_s: float) -> None:
        if wall_s < 1.0:
            return
        self.shown = True
        done = ""
        if self.total:
            done = f"{arrived}/{self.total} requests arrived, "
        elif self.horizon:
            done = f"{100 * now_us / self.horizon:.0f}% of the horizon, "
        sys.stderr.write(f"\r{done}simulated {now_us / 1e6:.1f} s in {wall_s:.1f} s wall ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    out: Annotated[Path | None, typer.Option(help="output folder")] = None,
    seed: Annotated[int | None, typer.Option(help="override the scenario's seed")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress report")] = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a scenario value: --set policies.routing.type=least-loaded")
    ] = None,
) -> None:
    """Run a scenario: print the summary JSON and write the results folder."""
    try:
        sim = prepared(scenario, seed, set_)
    except ScenarioError as exc:
        raise fail(exc) from None
    resolved = sim.scenario
    bar = None
    if not quiet and sys.stderr.isatty():
        workload = resolved.workload
        bar = ProgressBar(getattr(workload, "num_requests", None), resolved.horizon_us)
    started = time.perf_counter()
    try:
        result = simulate(sim, progress=bar)
    except ScenarioError as exc:
        raise fail(exc) from None
    finally:
        if bar is not None:
            bar.close()
    target = out or Path(resolved.outputs.dir or Path("out") / resolved.name)
    result.save(target, resolved.outputs.tables)
    typer.echo(result.summary_json(), nl=False)
    if not quiet:
        typer.echo(f"wrote {target} ({time.perf_counter() - started:.2f} s)", err=True)


@app.command()
def validate(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a value")] = None,
) -> None:
    """Check a scenario file without running it."""
    try:
        prepared(scenario, overrides=set_)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(f"{scenario}: ok")


@convert_app.command(
    "blis-command",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def convert_blis_command(
    args: Annotated[list[str] | None, typer.Argument(help="`-- run --model ...`")] = None,
) -> None:
    """Turn a reference `simulation_worker run ...` command line into a compat scenario."""
    from blis_simpy.compat import convert

    try:
        data = convert.blis_command(list(args or []), Path.cwd())
        Scenario.from_dict(data)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(convert.to_yaml(data), nl=False)


@convert_app.command("policy-config")
def convert_policy_config(
    path: Annotated[Path, typer.Argument(help="reference PolicyBundle YAML (--policy-config)")],
) -> None:
    """Turn a reference `--policy-config` YAML into a blis-simpy `policies:` section."""
    from blis_simpy.compat import convert

    try:
        policies = convert.policy_config(path)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(convert.policies_yaml(policies, path), nl=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
