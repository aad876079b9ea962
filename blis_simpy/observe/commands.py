"""The accuracy commands of the command line, registered by `cli.py`: `validate-real`
(simulated against measured, every public set in one table, cross-validation), `calibrate`
(fit the physical step model to a user's own benchmark output) and `observe` (drive a real
server with a scenario's workload). Each imports its layers when it runs."""

# No `from __future__ import annotations`: typer reads these signatures on every start of the
# command line (cli.py says why).
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from blis_simpy.core.errors import ScenarioError

if TYPE_CHECKING:
    from blis_simpy.validate.sets import Stage

INPUTS_HELP = ("measured runs: set files (JSON), benchmark results (vLLM, SGLang, GuideLLM "
               "JSON, per-request CSV/JSONL) or inference-perf folders")


def _fail(exc: ScenarioError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def _stages(inputs: list[Path] | None, fmt: str, model: str | None, gpu: str, tp: int,
            server: str, version: str, bundled: bool, graph_max_batch: int | None = None
            ) -> list["Stage"]:
    """The stages of the bundled public sets (if `bundled`) and of every input; the inputs'
    stages with the server's captured-graph limit where `graph_max_batch` gives it."""
    from dataclasses import replace

    from blis_simpy.validate.importers import Hints, read
    from blis_simpy.validate.sets import bundled_sets

    hints = Hints(model=model, gpu=gpu, tp=tp, server=server, version=version)
    own = [stage for path in inputs or () for stage in read(path, hints, fmt).stages]
    if graph_max_batch is not None:
        own = [replace(s, engine={**s.engine, "graph_max_batch": graph_max_batch}) for s in own]
    public = bundled_sets() if bundled else []
    return [stage for measured in public for stage in measured.stages] + own


def _progress(text: str) -> None:
    typer.echo(text, err=True)


def validate_real(
    inputs: Annotated[list[Path] | None, typer.Argument(
        help=INPUTS_HELP + "; default: every public set bundled with blis-simpy")] = None,
    only: Annotated[str | None, typer.Option(
        help="run only the stages whose set:name contains this text")] = None,
    latency_type: Annotated[str, typer.Option(
        "--latency", help="physical (each server family's coefficients) or roofline")
    ] = "physical",
    coefficients: Annotated[Path | None, typer.Option(
        help="use these coefficients (a file written by blis-simpy calibrate)")] = None,
    cv: Annotated[str | None, typer.Option(
        help="cross-validate: fit without each measured set (set) or model (model) and "
             "report only the held-out stages")] = None,
    requests: Annotated[int | None, typer.Option(
        min=1, help="simulate at most this many requests of each stage (faster)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="the inputs' format (auto: detect)")
                   ] = "auto",
    model: Annotated[str | None, typer.Option(help="inputs: the model, when they do not say")
                     ] = None,
    gpu: Annotated[str, typer.Option(help="inputs: the GPU they ran on")] = "H100",
    tp: Annotated[int, typer.Option(min=1, help="inputs: tensor parallelism")] = 1,
    server: Annotated[str, typer.Option(help="inputs: the server family (vllm, sglang)")
                      ] = "vllm",
    graph_max_batch: Annotated[int | None, typer.Option(
        min=0, help="inputs: the largest step the server ran in captured graphs (32 for SGLang "
        "with --enable-torch-compile; 0: none, vLLM's --enforce-eager; docs/step-model.md); "
        "default: the server family's")
    ] = None,
    seed: Annotated[int, typer.Option(help="the scenarios' seed")] = 42,
) -> None:
    """Simulate every measured stage and print measured vs simulated E2E, TPOT/ITL, TTFT and
    throughput with the signed errors, then the median |error| by set (latencies below
    saturation, throughput past it)."""
    from blis_simpy.validate.harness import Latency, report

    try:
        stages = _stages(inputs, fmt, model, gpu, tp, server, "", bundled=not inputs,
                         graph_max_batch=graph_max_batch)
        if only:
            stages = [s for s in stages if only in s.key]
            if not stages:
                raise ScenarioError("--only", f"{only!r} matches no stage")
        if cv is not None:
            if coefficients is not None or latency_type != "physical":
                raise ScenarioError("--cv", "fits its own coefficients", "no --coefficients, "
                                    "--latency physical")
            from blis_simpy.calibrate.crossval import cross_validate

            latency = Latency(None, f"physical model, cross-validated by {cv}")
            rows = cross_validate(stages, cv, seed=seed, requests=requests,
                                  progress=_progress)
        else:
            if coefficients is not None:
                latency = Latency.from_file(coefficients)
            elif latency_type == "roofline":
                latency = Latency.roofline()
            elif latency_type == "physical":
                latency = Latency.default()
            else:
                raise ScenarioError("--latency", f"unknown model {latency_type!r}",
                                    "physical, roofline")
            from blis_simpy.validate.harness import validate

            rows = validate(stages, latency, seed=seed, max_requests=requests,
                            progress=lambda s: _progress(f"simulating {s.key}"))
    except ScenarioError as exc:
        raise _fail(exc) from None
    typer.echo(report(rows, latency), nl=False)
    if cv is None:
        from blis_simpy.validate.harness import in_sample

        fitted = in_sample(stages, latency)
        if fitted:
            typer.echo(f"in-sample: {len(fitted)} of {len(stages)} stages were fitted by these "
                       "coefficients (their fit.stages), so their errors measure the fit, not "
                       "a prediction; hold them out (calibrate --hold-out) or use --cv for "
                       "out-of-sample figures")


def calibrate(
    inputs: Annotated[list[Path] | None, typer.Argument(help=INPUTS_HELP)] = None,
    out: Annotated[Path, typer.Option(
        help="coefficients file to write (JSON; one per server family: -<family> added "
             "when the inputs hold several)")] = Path("coefficients.json"),
    with_public: Annotated[bool, typer.Option(
        "--with-public/--alone", help="fit together with the bundled public sets (they "
        "identify what your runs do not exercise), or on your runs alone")] = True,
    hold_out: Annotated[str | None, typer.Option(
        help="leave the stages whose set:name contains this text out of the fit and report "
             "on them")] = None,
    requests: Annotated[int | None, typer.Option(
        min=1, help="requests of each stage simulated while fitting")] = None,
    rounds: Annotated[int | None, typer.Option(min=1, help="simulate-and-fit rounds at most")
                      ] = None,
    fmt: Annotated[str, typer.Option("--format", help="the inputs' format (auto: detect)")
                   ] = "auto",
    model: Annotated[str | None, typer.Option(help="the model, when the inputs do not say")
                     ] = None,
    gpu: Annotated[str, typer.Option(help="the GPU the inputs ran on")] = "H100",
    tp: Annotated[int, typer.Option(min=1, help="tensor parallelism")] = 1,
    server: Annotated[str, typer.Option(help="the server family (vllm, sglang, ...)")
                      ] = "vllm",
    version: Annotated[str, typer.Option(help="the server's version, for the record")] = "",
    graph_max_batch: Annotated[int | None, typer.Option(
        min=0, help="inputs: the largest step the server ran in captured graphs (32 for SGLang "
        "with --enable-torch-compile; 0: none, vLLM's --enforce-eager; docs/step-model.md); "
        "default: the server family's")
    ] = None,
    seed: Annotated[int, typer.Option(help="the scenarios' seed")] = 42,
    force: Annotated[bool, typer.Option(help="replace an existing --out file")] = False,
) -> None:
    """Fit the physical step model to measured runs and write the coefficients; print which
    coefficients the data identified and the errors on held-out stages only."""
    from blis_simpy.calibrate.coefficients import (
        COEFFICIENTS_FILE,
        identification_table,
        impossible,
        write_sets,
    )
    from blis_simpy.calibrate.fit import ROUNDS, fit
    from blis_simpy.core.files import check_replaceable
    from blis_simpy.validate.harness import FIT_REQUESTS, Latency, report, validate

    try:
        if not inputs and not with_public:
            raise ScenarioError("inputs", "nothing to fit: give measured runs, or "
                                "--with-public")
        own = _stages(inputs, fmt, model, gpu, tp, server, version, bundled=False,
                      graph_max_batch=graph_max_batch)
        public = _stages(None, fmt, model, gpu, tp, server, version, bundled=with_public)
        stages = own + public
        held = [s for s in stages if hold_out and hold_out in s.key]
        if hold_out and not held:
            raise ScenarioError("--hold-out", f"{hold_out!r} matches no stage")
        fitted_on = [s for s in stages if s not in held]
        check_replaceable(out, "--out", COEFFICIENTS_FILE, force)  # before the fit, not after
        fitted = fit(fitted_on, seed=seed, max_requests=requests or FIT_REQUESTS,
                     rounds=rounds or ROUNDS,
                     progress=lambda r, f, n: _progress(f"round {r}: {n} equations"))
        families = sorted({s.server for s in own}) or fitted.families
        source = (f"blis-simpy calibrate on {', '.join(map(str, inputs or ()))}"
                  + (" and the bundled public sets" if with_public else ""))
        written = write_sets(fitted, out, source, families, force=force)
    except ScenarioError as exc:
        raise _fail(exc) from None
    for path in written:
        typer.echo(f"wrote {path}", err=True)
    typer.echo(f"fitted on {len(fitted.stages)} stages; coefficients and what the data "
               "identified:")
    typer.echo(identification_table(fitted))
    for warning in impossible(fitted):
        typer.echo(f"warning: {warning}", err=True)
    if held:
        try:
            files = dict(zip(families, written, strict=True))
            rows = validate(held, Latency.files(files), seed=seed)
        except ScenarioError as exc:
            raise _fail(exc) from None
        typer.echo("")
        typer.echo(report(rows, Latency.files(files)), nl=False)


def observe(
    scenario: Annotated[Path, typer.Argument(help="scenario (YAML or library name) whose "
                                             "workload is sent")],
    url: Annotated[str, typer.Option(help="the server, e.g. http://localhost:8000/v1")],
    served_model: Annotated[str | None, typer.Option(
        "--served-model", help="the model name the server serves (default: the scenario's)")
    ] = None,
    out: Annotated[Path, typer.Option(help="folder for requests.jsonl and measured.json")
                   ] = Path("observed"),
    concurrency: Annotated[int, typer.Option(min=1, help="requests in flight at most")] = 64,
    duration: Annotated[float, typer.Option(min=0.001, help="seconds to send for")] = 60.0,
    requests: Annotated[int | None, typer.Option(min=1, help="send at most this many")
                        ] = None,
    grace: Annotated[float, typer.Option(min=0, help="seconds in-flight requests get after "
                                         "--duration")] = 30.0,
    api_key: Annotated[str | None, typer.Option(envvar="OPENAI_API_KEY", show_envvar=False,
                                                help="bearer token, if the server wants one")
                       ] = None,
    force: Annotated[bool, typer.Option(help="replace an earlier observation's files in --out")
                     ] = False,
) -> None:
    """Send a scenario's workload to an OpenAI-compatible streaming endpoint (at its arrival
    times, bounded concurrency and time) and write the per-request timings and a measured
    set that `blis-simpy calibrate` reads."""
    import asyncio

    from blis_simpy.config.library import scenario_file
    from blis_simpy.config.scenario import Scenario
    from blis_simpy.observe.client import Endpoint
    from blis_simpy.observe.run import check_out, drive, measured_set, plan, record, write

    try:
        endpoint = Endpoint.parse(url, api_key)
    except ValueError as exc:
        raise _fail(ScenarioError("--url", str(exc))) from None
    try:
        loaded = Scenario.from_yaml(scenario_file(scenario))
        planned = plan(loaded, requests)
        check_out(out, force)

        from blis_simpy.core.status import StatusLine

        status = StatusLine()

        def shown(done: int, total: int) -> None:
            status.show(f"observe: {done}/{total} requests back (answered or failed)", done, total)

        try:
            results = asyncio.run(drive(endpoint, served_model or loaded.model.name, planned,
                                        concurrency, duration, grace, progress=shown))
        finally:
            status.close()
        rows = [record(o) for o in results]
        write(out, rows, measured_set(loaded, rows, url, concurrency, duration), force)
    except ScenarioError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(ScenarioError(str(out), f"cannot write: {exc.strerror or exc}")) from None
    failed = sum("error" in r for r in rows)
    typer.echo(f"{len(rows)} requests sent, {failed} failed; wrote {out / 'requests.jsonl'} "
               f"and {out / 'measured.json'}")


def register(app: typer.Typer) -> None:
    app.command("validate-real")(validate_real)
    app.command()(calibrate)
    app.command()(observe)
