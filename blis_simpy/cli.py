"""The command line: a thin layer over the API that validates, runs and writes files.

Bad input exits with status 2 and one line on stderr naming what was wrong; nothing is written.

Each command imports what it needs when it runs (`--help` and `run` load neither the search
layer nor the importers and plotting of other commands); `main` keeps numpy's BLAS to one
thread before numpy is first imported, collects no garbage while a run loads, and spares the
interpreter's last garbage collections at exit (docs/performance.md: Start-up).
"""

# No `from __future__ import annotations` here, unlike elsewhere: typer reads every command's
# signature on each start, and string annotations made it compile ~290 of them (10 ms a run).
import dataclasses
import gc
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from blis_simpy.config.library import LIBRARY, scenario_file
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import US_PER_S
from blis_simpy.observe.commands import register as register_accuracy_commands
from blis_simpy.search.commands import register as register_search_commands

if TYPE_CHECKING:
    from blis_simpy.config.scenario import Scenario
    from blis_simpy.sim.build import RunProgress, Simulation

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Simulate LLM inference serving: `blis-simpy run scenario.yaml`.",
)
convert_app = typer.Typer(no_args_is_help=True, help="Convert reference BLIS inputs to scenarios.")
app.add_typer(convert_app, name="convert")
workload_app = typer.Typer(no_args_is_help=True, help="Export a scenario's workload.")
app.add_typer(workload_app, name="workload")


@app.callback()
def collect_unless_running(ctx: typer.Context) -> None:
    """`main` turns garbage collection off while the process loads; a `run` has it back on
    while its event loop runs (sim/build.py: sparse_collection), every other command from
    here on."""
    if ctx.invoked_subcommand != "run":
        gc.enable()


def fail(exc: ScenarioError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def with_seed(scenario: "Scenario", seed: int | None, sets: Mapping[str, Any]) -> "Scenario":
    """`--seed` over the scenario's own; refused when a `--set seed=` says another (one of
    the two was silently dropped: newcomer 19 #10c)."""
    from blis_simpy.config.scenario import one_seed

    one_seed(seed, sets, "--seed", "--set seed")
    return scenario if seed is None else dataclasses.replace(scenario, seed=seed)


def prepared(path: Path, seed: int | None = None, overrides: list[str] | None = None,
             fitness_weights: str | None = None, policy_config: Path | None = None
             ) -> "Simulation":
    """Load, apply the policy bundle then the overrides, and build, so every input error
    surfaces before running."""
    from blis_simpy.config.fitness import FitnessConfig, parse_weights
    from blis_simpy.config.scenario import Scenario, parse_sets
    from blis_simpy.sim.run import prepare

    path = scenario_file(path)
    user_code_importable(path)
    bundle, changes = None, None
    if policy_config is not None:
        from blis_simpy.policies.bundle import PolicyBundle

        bundle = PolicyBundle.from_yaml(policy_config)
        base = Scenario.from_yaml(path)
        try:
            changes = bundle.overrides(base)  # where its axes land depends on the scenario
        except ScenarioError as exc:
            raise exc.in_file(policy_config) from None
    sets = parse_sets(overrides or ())
    try:
        scenario = Scenario.from_yaml(path, sets, changes)
    except ScenarioError as exc:
        raise exc if bundle is None else bundle.blame(exc, policy_config) from None
    scenario = with_seed(scenario, seed, sets)
    if fitness_weights is not None:
        scenario = dataclasses.replace(
            scenario, fitness=FitnessConfig(weights=parse_weights(fitness_weights)))
    try:
        return prepare(scenario)
    except ScenarioError as exc:
        raise exc.in_file(path) from None


def user_code_importable(scenario: Path) -> None:
    """Let `module:Class` policies be found as with `python -m`: the current folder, then the
    scenario file's folder, are searched after the installed packages (never shadowing them)."""
    for folder in (Path.cwd(), scenario.parent.resolve()):
        if str(folder) not in sys.path:
            sys.path.append(str(folder))


class ProgressBar:
    """A live line on stderr (core/status.py: rich): requests finished of the total (when
    known), simulated time, events/s and an ETA; then the drain (every request has arrived,
    some still run) and the writing of the outputs. Shown after the run has taken a second,
    or at once when forced; the closing `[done]` line stays."""

    def __init__(self, total: int | None, arrivals_end_us: int | None,
                 horizon_us: int | None, forced: bool) -> None:
        from blis_simpy.core.status import StatusLine

        self.total, self.arrivals_end, self.horizon = total, arrivals_end_us, horizon_us
        self.forced = forced
        self.shown = False
        self.status = StatusLine()

    def __call__(self, p: "RunProgress") -> None:
        if not (self.forced or p.wall_s >= 1.0):
            return
        self.shown = True
        if p.done:
            self.status.note(self.line(p))
        elif self.total:
            self.status.show(self.line(p), p.finished, self.total)
        else:
            end = self.horizon or self.arrivals_end
            self.status.show(self.line(p), p.now_us if end else None, end)

    def line(self, p: "RunProgress") -> str:
        rate = p.events / p.wall_s if p.wall_s > 0 else 0.0
        sim = f"sim {p.now_us / US_PER_S:,.1f} s, {rate:,.0f} events/s"
        if p.done:
            return (f"[done] {p.finished:,} of {p.arrived:,} requests finished, {sim}, "
                    f"{p.wall_s:.1f} s")
        draining = (self.total is not None and p.arrived >= self.total) or (
            self.arrivals_end is not None and p.now_us >= self.arrivals_end)
        phase = "[drain] all arrived; " if draining else "[run] "
        of = f"/{self.total:,}" if self.total else ""
        return (f"{phase}{p.finished:,}{of} requests finished ({p.arrived:,} arrived), {sim}"
                f"{self.eta(p)}")

    def eta(self, p: "RunProgress") -> str:
        """Wall time left, from the share of the work done: requests finished of the total,
        else simulated time of the horizon (or of the arrival window)."""
        end = self.horizon or self.arrivals_end
        if self.total and p.finished:
            share = p.finished / self.total
        elif end and p.now_us:
            share = min(1.0, p.now_us / end)
        else:
            return ""
        return f", ETA {p.wall_s * (1 - share) / share:,.0f} s" if share > 0 else ""

    def writing(self, target: Path) -> None:
        if self.shown:
            self.status.show(f"[write] {target}")

    def close(self) -> None:
        self.status.close()


def progress_bar(scenario: "Scenario", forced: bool, total: int | None = None
                 ) -> ProgressBar:
    """What the bar can know in advance: the request count (`total`: a trace's rows, counted
    when it was checked) and when arrivals stop."""
    workload = scenario.workload
    total = total or getattr(workload, "num_requests", None) or getattr(
        workload, "max_requests", None)
    window = getattr(workload, "duration_s", None)
    end = None if window is None else round(window * US_PER_S)
    return ProgressBar(total, end, scenario.horizon_us, forced)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(
        help="scenario YAML, or a library name (blis-simpy scenarios)")],
    out: Annotated[Path | None, typer.Option(
        help="output folder (default out/<name>); must be new or empty unless --force")] = None,
    force: Annotated[bool, typer.Option(
        help="replace an existing output folder whole (the old one stays if the run fails)")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="override the scenario's seed")] = None,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--quiet", help="progress report on stderr (default: on a terminal, after "
        "a second); --quiet also drops the closing lines")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a scenario value: --set policies.routing.type=least-loaded")
    ] = None,
    fitness_weights: Annotated[str | None, typer.Option(
        help='objective weights, e.g. "throughput:0.5,p99_ttft:0.3" '
        '(docs/reference/metrics.md)')] = None,
    policy_config: Annotated[Path | None, typer.Option(
        help="policy bundle YAML (every axis; docs/guides/policy-search.md); --set still wins")
    ] = None,
    trace_level: Annotated[str | None, typer.Option(
        help="none, decisions or full (cluster.trace_level): what the decision trace "
        "records")] = None,
    trace_format: Annotated[list[str] | None, typer.Option(
        help="extra trace file: jsonl (decisions.jsonl) or perfetto (trace.json); "
        "repeatable (outputs.trace_formats)")] = None,
    records: Annotated[str, typer.Option(
        help="memory, stream (requests and steps written as the run goes, memory flat in "
        "its length: docs/scale.md) or auto (stream from 1,000,000 requests)")] = "auto",
) -> None:
    """Run a scenario: print the summary JSON and write the results folder."""
    from blis_simpy.sim.output import OutputFolder
    from blis_simpy.sim.run import simulate

    overrides = list(set_ or [])
    if trace_level is not None:
        overrides.append(f"cluster.trace_level={trace_level}")
    if trace_format:
        overrides.append(f"outputs.trace_formats=[{', '.join(trace_format)}]")
    try:
        sim = prepared(scenario, seed, overrides, fitness_weights, policy_config)
        resolved = sim.scenario
        target = out or Path(resolved.outputs.dir or Path("out") / resolved.name)
        folder = OutputFolder(target, resolved.outputs.tables, force,
                              "--out" if out else "outputs.dir", ending=lambda: bool(RECEIVED))
    except ScenarioError as exc:
        raise fail(exc) from None
    quiet = progress is False
    bar = None
    if progress or (progress is None and sys.stderr.isatty()):
        bar = progress_bar(resolved, forced=bool(progress), total=sim.expected)
    started = time.perf_counter()
    try:
        result = simulate(sim, progress=bar, folder=folder, record_mode=records)
        if bar is not None:
            bar.writing(target)
        result.save(folder)
    except ScenarioError as exc:
        raise fail(exc) from None
    except OSError as exc:
        raise fail(ScenarioError("--out", f"cannot write {target}: {exc.strerror or exc}")) \
            from None
    finally:
        folder.discard()
        if bar is not None:
            bar.close()
    typer.echo(result.summary_json(), nl=False)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if not quiet:
        evaluation = result.evaluation
        if evaluation is not None and evaluation.weights:
            typer.echo(f"fitness {evaluation.fitness:.6g} {evaluation.objectives}", err=True)
        typer.echo(f"wrote {target} ({time.perf_counter() - started:.2f} s)", err=True)


@app.command()
def validate(
    scenario: Annotated[Path, typer.Argument(
        help="scenario YAML, or a library name (blis-simpy scenarios)")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a value")] = None,
) -> None:
    """Check a scenario file without running it."""
    try:
        prepared(scenario, overrides=set_)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(f"{scenario}: ok")


def scenario_description(path: Path) -> str:
    """The first sentence of a scenario file's leading `# ...` comment, whole however many
    lines it takes (none for a file that cannot be read: a FIFO or a folder named *.yaml is
    listed, not waited on)."""
    import re

    from blis_simpy.core.files import open_input

    lines: list[str] = []
    try:
        with open_input(path, "--dir") as f:
            for _ in range(20):
                line = f.readline(1000).decode("utf-8", errors="replace").strip()
                if not line.startswith("#"):
                    break
                lines.append(line.lstrip("#").strip())
    except (ScenarioError, OSError):
        return ""
    text = " ".join(line for line in lines if line)
    end = re.search(r"[.!?](\s|$)", text)
    return text[:end.start() + 1] if end else text


@app.command("scenarios")
def list_scenarios(
    dir_: Annotated[Path, typer.Option(
        "--dir", help="folder of scenario YAML files (default: the library shipped with the "
        "package)")] = LIBRARY,
) -> None:
    """List the scenario library: name and one-line description; run one by name with
    `blis-simpy run NAME`."""
    files = sorted(dir_.glob("*.yaml")) if dir_.is_dir() else []
    if not files:
        raise fail(ScenarioError("--dir", f"no scenario files (*.yaml) in {dir_}"))
    width = max(len(f.stem) for f in files)
    for path in files:
        typer.echo(f"{path.stem:<{width}}  {scenario_description(path)}".rstrip())


@convert_app.command(
    "blis-command",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def convert_blis_command(
    args: Annotated[list[str] | None, typer.Argument(help="`-- run --model ...`")] = None,
) -> None:
    """Turn a reference `simulation_worker run ...` command line into a compat scenario."""
    from blis_simpy.compat import convert
    from blis_simpy.config.scenario import Scenario

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
    from blis_simpy.compat.policy_config import policies_yaml, policy_config

    try:
        policies = policy_config(path)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(policies_yaml(policies, path), nl=False)


@workload_app.command("sample")
def workload_sample(
    scenario: Annotated[Path, typer.Argument(
        help="scenario YAML, or a library name (blis-simpy scenarios)")],
    out: Annotated[Path, typer.Option(help="trace CSV to write (the reference's format); "
                                    "- for stdout")],
    seed: Annotated[int | None, typer.Option(help="override the scenario's seed")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a value")] = None,
    force: Annotated[bool, typer.Option(help="replace an existing --out file")] = False,
) -> None:
    """Run a scenario and write every request that arrived as a trace CSV, replayable by
    `workload: {type: trace}` and by the reference (extra tenant columns come last)."""
    from blis_simpy.config.scenario import Scenario, parse_sets
    from blis_simpy.sim.sample import sample

    try:
        sets = parse_sets(set_ or ())
        loaded = with_seed(Scenario.from_yaml(scenario_file(scenario), sets), seed, sets)
        if str(out) == "-":  # stdout, as the usual meaning of -
            import shutil
            import tempfile

            with tempfile.TemporaryDirectory() as folder:
                count = sample(loaded, Path(folder) / "trace.csv")
                with (Path(folder) / "trace.csv").open("rb") as f:
                    sys.stdout.flush()
                    shutil.copyfileobj(f, sys.stdout.buffer)
                    sys.stdout.buffer.flush()
        else:
            count = sample(loaded, out, force)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(f"wrote {'stdout' if str(out) == '-' else out} ({count} requests)", err=True)


@convert_app.command("workload-spec")
def convert_workload_spec(
    path: Annotated[Path, typer.Argument(help="reference workload-spec YAML (--workload-spec)")],
) -> None:
    """Turn a reference `--workload-spec` YAML into a blis-simpy `workload:` section."""
    from blis_simpy.compat.workload_spec import workload_spec
    from blis_simpy.workload.imported import workload_yaml

    try:
        converted = workload_spec(path)
    except ScenarioError as exc:
        raise fail(exc) from None
    title = (f"Converted from the reference BLIS workload spec {path}; drawn from blis-simpy's "
             "own random streams, not the reference's.")
    typer.echo(workload_yaml(converted, title), nl=False)


@convert_app.command("inference-perf")
def convert_inference_perf(
    path: Annotated[Path, typer.Argument(help="inference-perf config YAML (load and data)")],
) -> None:
    """Turn an inference-perf config's load stages and data into a `workload:` section."""
    from blis_simpy.workload.imported import workload_yaml
    from blis_simpy.workload.inference_perf import inference_perf

    try:
        converted = inference_perf(path)
    except ScenarioError as exc:
        raise fail(exc) from None
    title = f"Converted from the inference-perf config {path} (its load and data sections)."
    typer.echo(workload_yaml(converted, title), nl=False)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a run's output folder (run --out)")],
    out: Annotated[Path | None, typer.Option(
        help="plot folder (default: RUN_DIR/plots); with --html, the file (default: "
        "RUN_DIR/report.html)")] = None,
    html: Annotated[bool, typer.Option(
        "--html", help="one self-contained HTML file with interactive plots instead of PNGs")
    ] = False,
    force: Annotated[bool, typer.Option(help="with --html and --out, replace an existing "
                                        "file")] = False,
) -> None:
    """Plot a finished run: latency CDFs, per-instance state, throughput; with --html, also
    the summary, SLO attainment per class and tenant, anomalies and the trace summary.

    Needs matplotlib (PNG) or bokeh (--html), from the plots extra: pip install
    'blis-simpy\\[plots]'."""
    try:
        if html:
            from blis_simpy.report.html import render_html

            # the default file in the run's folder is this command's own: rewritten freely
            written = [render_html(run_dir, out or run_dir / "report.html",
                                   force or out is None)]
        else:
            from blis_simpy.report import plots

            written = plots.render(run_dir, out or run_dir / "plots")
    except ScenarioError as exc:
        raise fail(exc) from None
    for path in written:
        typer.echo(str(path))


@app.command()
def summarize(
    run_dir: Annotated[Path, typer.Argument(help="a run's output folder (run --out)")],
    max_tokens: Annotated[int, typer.Option(
        help="size bound, in tokens of about 4 characters")] = 1000,
    strategy: Annotated[str, typer.Option(
        help="issue_focused, decision_audit, counterfactual or pattern_mining")
    ] = "issue_focused",
) -> None:
    """Print a finished run's trace summary (Markdown): outcome against the SLO targets, key
    issues, counterfactuals, worst decisions, suggested focus. Decision sections need a run
    with --trace-level decisions."""
    from blis_simpy.metrics.trace.summary import MIN_TOKENS, STRATEGIES
    from blis_simpy.report.trace_summary import summarize as summary_of

    if strategy not in STRATEGIES:
        raise fail(ScenarioError("--strategy", f"unknown strategy {strategy!r}",
                                 ", ".join(STRATEGIES)))
    if max_tokens < MIN_TOKENS:
        raise fail(ScenarioError("--max-tokens", f"got {max_tokens}",
                                 f"an integer >= {MIN_TOKENS}"))
    try:
        text = summary_of(run_dir, max_tokens, strategy)
    except ScenarioError as exc:
        raise fail(exc) from None
    typer.echo(text, nl=False)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(
        help="run output folders: A and B, or with --html two or more")],
    json_: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")
                     ] = False,
    html: Annotated[Path | None, typer.Option(
        "--html", help="write the runs side by side, with interactive plots, to this HTML "
        "file instead")] = None,
    force: Annotated[bool, typer.Option(help="replace an existing --html file")] = False,
) -> None:
    """Print two runs' summary.json side by side with the B/A ratio of each number, after
    each run's saturation verdict and warnings; with --html, write two or more runs'
    verdicts, summaries, SLO attainment and plots to one file."""
    try:
        if html is not None:
            if len(runs) < 2:
                raise ScenarioError("compare", f"got {len(runs)} run folder", "two or more")
            from blis_simpy.report.html import compare_html

            typer.echo(str(compare_html(runs, html, force)))
            return
        if len(runs) != 2:
            raise ScenarioError("compare", f"got {len(runs)} run folders",
                                "two (A and B), or two or more with --html FILE")
        from blis_simpy.report import compare as comparison

        run_a, run_b = runs
        rows, states = comparison.compare_runs(run_a, run_b)
    except ScenarioError as exc:
        raise fail(exc) from None
    show = comparison.as_json if json_ else comparison.table
    typer.echo(show(rows, run_a, run_b, states), nl=False)


register_accuracy_commands(app)
register_search_commands(app)


# What `timeout`, CI runners, Kubernetes and a closed terminal send to end a process.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# The ending signals this process has received: process-wide, as signal handlers are.
RECEIVED: list[int] = []


def end_like_ctrl_c(received: list[int]) -> None:
    """SIGTERM and SIGHUP handled as SIGINT is: a KeyboardInterrupt, so every `finally`
    runs (a run's staging folder and partial files are removed, nothing half-written stays);
    `main` then ends the process by the signal itself. Later signals are ignored so the
    clean-up is not cut short; forked children (worker pools) get the default handling."""
    def interrupt(signum: int, frame: object) -> None:
        for sig in ENDING_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        received.append(signum)
        raise KeyboardInterrupt

    for sig in ENDING_SIGNALS:
        signal.signal(sig, interrupt)
    os.register_at_fork(after_in_child=lambda: [signal.signal(sig, signal.SIG_DFL)
                                                for sig in ENDING_SIGNALS])


def main() -> None:
    received = RECEIVED
    end_like_ctrl_c(received)
    # One simulation is one thread: OpenBLAS would start a thread per core when numpy loads
    # (60 ms of a 1K run here) for no gain. A value the user set wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Loading (imports, ~125 dataclasses, the scenario, building) allocates a great many
    # objects and almost no garbage cycles: collecting during it cost 30-40 ms of a 1K run.
    # A run's event loop collects again (sim/build.py: sparse_collection), every other
    # command from its start (`collect_unless_running`).
    gc.disable()
    try:
        app()
    finally:
        # The process ends here: without this, the interpreter's last collections walk every
        # object and module once more (50 ms of a 1K run, 10 ms with it) to free memory the
        # operating system takes back anyway. Every file is closed by now.
        gc.freeze()
        if received:  # cleaned up; now end as the signal asked (status 128 + its number)
            signal.signal(received[0], signal.SIG_DFL)
            os.kill(os.getpid(), received[0])


if __name__ == "__main__":
    main()
