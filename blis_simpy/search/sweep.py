"""Sweeps: every (scenario, policy, seed) run on a pool of worker processes, one tidy table.

A policy search calls the simulator thousands of times, so a sweep is the unit of work:
scenarios are parsed and every candidate is validated once, in the caller, before any run
starts (a bad candidate fails the sweep at once, naming it); the runs then go to an executor
whose worker processes stay up for the whole sweep. A run whose user policy fails while
running becomes a row with the error and fitness 0, so a search goes on past a broken
candidate.

Common random numbers: a run's workload comes from its scenario and seed alone (the named
random streams of `blis_simpy.rng`), so the same seed gives every policy the same requests,
and differences between policies are paired (`compare_policies`).

Rows never depend on the executor or on the number of workers: they are built from each run's
records only (no wall time) and returned in job order.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.arguments import callback, instance, integer, integers
from blis_simpy.core.errors import PolicyError, ScenarioError
from blis_simpy.policies.bundle import PolicyBundle
from blis_simpy.search.code import CodePolicy, CodeRejected, check
from blis_simpy.search.contain import Limits, SandboxUnavailable, sandbox
from blis_simpy.search.feedback import feedback
from blis_simpy.search.remote import Contained
from blis_simpy.sim.result import Result
from blis_simpy.sim.run import ScenarioForm, load, run

if TYPE_CHECKING:
    import pandas as pd

# None: the scenario's own policies
Candidate = PolicyBundle | CodePolicy | Mapping[str, Any] | None
Progress = Callable[[int, int], None]  # (runs done, runs in all)
ID_COLUMNS = ("scenario", "policy", "seed", "candidate_id", "policy_id", "workload_id",
              "error", "fitness", "completion")


@dataclass(frozen=True)
class Task:
    """One run, with everything a worker needs: picklable, no file to read."""

    index: int
    scenario_name: str
    policy_name: str
    seed: int
    scenario: Scenario  # validated, with the candidate's overrides applied
    candidate_id: str
    code: CodePolicy | None = None  # run contained, within `limits`
    limits: Limits = field(default_factory=Limits)
    rejected: str = ""  # why the static check refused the code: the row is a zero


def run_many(scenarios: ScenarioForm | Sequence[ScenarioForm] | Mapping[str, ScenarioForm],
             policies: Mapping[str, Candidate] | None = None,
             seeds: Iterable[int] | None = None, *,
             overrides: Mapping[str, Any] | None = None, executor: Executor | None = None,
             workers: int | None = None, progress: Progress | None = None,
             limits: Limits | None = None) -> pd.DataFrame:
    """Run every scenario x policy x seed and return one row per run (`row` says which
    columns). `scenarios`: one scenario in any form `run` takes (a `Scenario`, a YAML path, a
    library name, a mapping of its sections), a list of them, or a mapping name -> form.
    `overrides`: dotted key paths -> values for every scenario ({"cluster.instances": 2}),
    or scenario names -> such mappings, for each its own.
    `policies` maps a name to a candidate: a `PolicyBundle`, a bundle or flat
    candidate mapping (`{"routing.type": "weighted", "routing.weights.prefix-affinity": 3}`),
    a `CodePolicy` (source for one axis, run contained within `limits`), or None for the
    scenario's own policies. `seeds` defaults to each scenario's seed.

    The runs go to `executor` (any `concurrent.futures.Executor`, e.g. a Dask
    `Client.get_executor()`), else to a process pool of `workers` processes (default: every
    core); `workers=1` runs them here, one after another."""
    import pandas as pd

    instance("policies", policies if policies is not None else {}, Mapping,
             "a mapping of names to candidates, or None")
    workers = None if workers is None else integer("workers", workers, low=1)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ScenarioError("executor", f"expected a concurrent.futures.Executor, got "
                            f"{type(executor).__name__}", "an Executor, or None")
    callback("progress", progress, "a function taking (runs done, runs in all), or None")
    instance("limits", limits, (Limits, type(None)), "a Limits, or None")
    tasks = plan(named_scenarios(scenarios, overrides), policies or {"scenario": None}, seeds,
                 limits or Limits())
    frame = pd.DataFrame(execute(tasks, executor, workers, progress))
    counted = [c for c in frame.columns if c.startswith("anomaly.")]
    frame[counted] = frame[counted].fillna(0).astype(int)  # a kind absent from a run: 0
    return frame


def named_scenarios(scenarios: Any, overrides: Mapping[str, Any] | None = None
                    ) -> dict[str, Scenario]:
    """Scenario name -> parsed scenario with its overrides; files are read once, here."""
    if is_form(scenarios):
        scenarios = [scenarios]
    instance("scenarios", scenarios, Iterable, "a scenario (a Scenario, a YAML path, a "
             "library name or a mapping of its sections), a list of them, or a mapping of "
             "names to them")
    if isinstance(scenarios, Mapping):
        pairs = [(str(name), load(entry(f"scenarios[{name!r}]", form)))
                 for name, form in scenarios.items()]
    else:
        parsed = [load(entry(f"scenarios[{i}]", form)) for i, form in enumerate(scenarios)]
        pairs = [(s.name, s) for s in parsed]
    named = dict(pairs)
    if len(named) != len(pairs):
        raise ScenarioError("scenarios", "two scenarios have the same name",
                            "distinct names, or a mapping name -> scenario")
    if not named:
        raise ScenarioError("scenarios", "no scenario to run")
    own = per_scenario(overrides, named)
    return {name: load(scenario, overrides=own.get(name)) if own.get(name) else scenario
            for name, scenario in named.items()}


def is_form(value: Any) -> bool:
    """One scenario (a mapping of its sections has a `version`), not a collection of them."""
    return isinstance(value, Scenario | str | Path) or (isinstance(value, Mapping)
                                                         and "version" in value)


def entry(where: str, form: Any) -> Any:
    """One scenario of a collection, refused by its place there when it is none."""
    if not is_form(form) and not isinstance(form, Mapping):
        raise ScenarioError(where, f"got {type(form).__name__}", "a Scenario, a YAML path, a "
                            "library name or a mapping of its sections")
    return form


def per_scenario(overrides: Mapping[str, Any] | None, names: Mapping[str, Scenario]
                 ) -> dict[str, Mapping[str, Any]]:
    """Each scenario's overrides: the same mapping for all, or each its own by name."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ScenarioError("overrides", f"got {type(overrides).__name__}", "a mapping of "
                            "dotted key paths to values, or scenario names to such mappings")
    keyed = [k for k in overrides if k in names]
    if not keyed:
        return dict.fromkeys(names, overrides)
    if len(keyed) != len(overrides):
        rest = [k for k in overrides if k not in names]
        raise ScenarioError("overrides", f"mixes scenario names ({', '.join(keyed)}) with "
                            f"other keys ({', '.join(map(str, rest))})", "dotted key paths "
                            "for every scenario, or scenario names -> dotted key paths")
    for name in keyed:
        if not isinstance(overrides[name], Mapping):
            raise ScenarioError(f"overrides[{name!r}]", f"got {type(overrides[name]).__name__}",
                                "a mapping of dotted key paths to values")
    return {name: overrides[name] for name in keyed}


def candidate_bundle(name: str, candidate: Candidate) -> PolicyBundle:
    if isinstance(candidate, PolicyBundle):
        return candidate
    try:
        return PolicyBundle.from_dict(candidate or {})
    except ScenarioError as exc:
        raise ScenarioError(f"policies[{name!r}].{exc.path}".rstrip("."), exc.problem,
                            exc.valid) from None


def plan(scenarios: Mapping[str, Scenario], policies: Mapping[str, Candidate],
         seeds: Iterable[int] | None, limits: Limits) -> list[Task]:
    """Every run, validated: a bad candidate or seed fails here, before any run starts; code
    the static check refuses becomes zero rows (a search produces such candidates)."""
    seed_list = None if seeds is None else integers("seeds", seeds)
    prepared = {name: prepare_candidate(name, c) for name, c in policies.items()}
    if any(code is not None and not rejected for _, _, code, rejected in prepared.values()):
        sandbox()  # code runs only in the sandbox: a machine without one refuses it now
    unweighted = [name for name, s in scenarios.items() if not s.fitness.weights]
    if unweighted:
        warnings.warn(f"fitness is 0 in every run of {', '.join(unweighted)}: the scenario "
                      "sets no fitness.weights (docs/reference/metrics.md); compare the metric "
                      "columns or give weights", UserWarning, stacklevel=3)
    tasks: list[Task] = []
    for scenario_name, scenario in scenarios.items():
        for policy_name, (overrides, candidate_id, code, rejected) in prepared.items():
            try:
                applied = load(scenario, overrides=overrides)
            except ScenarioError as exc:
                raise ScenarioError(f"policies[{policy_name!r}] on {scenario_name}: "
                                    f"{exc.path}", exc.problem, exc.valid) from None
            for seed in seed_list if seed_list is not None else [scenario.seed]:
                tasks.append(Task(len(tasks), scenario_name, policy_name, seed, applied,
                                  candidate_id, code, limits, rejected))
    return tasks


def prepare_candidate(name: str, candidate: Candidate
                      ) -> tuple[dict[str, Any], str, CodePolicy | None, str]:
    """(scenario overrides, candidate id, code or None, why the code was refused or "")."""
    if not isinstance(candidate, CodePolicy):
        bundle = candidate_bundle(name, candidate)
        return bundle.overrides(), bundle.meta.id or "", None, ""
    rejected = rejection(candidate)
    overrides = {} if candidate.bundle is None else candidate.bundle.overrides()
    if not rejected:
        overrides[f"policies.{candidate.axis}"] = {"type": candidate.type_name, "params": {}}
    return overrides, candidate.id, candidate, rejected


def rejection(code: CodePolicy) -> str:
    try:
        check(code)
    except CodeRejected as exc:
        return str(exc)
    return ""


def execute(tasks: list[Task], executor: Executor | None, workers: int | None,
            progress: Progress | None) -> list[dict[str, Any]]:
    """Each task's row, in task order, whatever order the workers finish in."""
    count = workers or os.cpu_count() or 1
    if executor is None and (count == 1 or len(tasks) == 1):
        rows = []
        for task in tasks:
            rows.append(evaluate(task))
            if progress is not None:
                progress(len(rows), len(tasks))
        return rows
    own = executor is None
    pool = ProcessPoolExecutor(max_workers=min(count, len(tasks))) if own else executor
    assert pool is not None
    try:
        futures: dict[Future[dict[str, Any]], int] = {
            pool.submit(evaluate, task): task.index for task in tasks}
        done: dict[int, dict[str, Any]] = {}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if progress is not None:
                progress(len(done), len(tasks))
    finally:
        if own:
            pool.shutdown(cancel_futures=True)
    return [done[i] for i in range(len(tasks))]


def evaluate(task: Task) -> dict[str, Any]:
    """Run one task (in a worker) and return its row; code runs in the sandbox."""
    if task.code is None:
        return evaluate_here(task)
    if task.rejected:
        return zero_row(task, f"candidate rejected: {task.rejected}")
    try:
        candidate = Contained(task.code, task.limits)
    except SandboxUnavailable:
        raise
    except ScenarioError as exc:  # the source does not load
        return {**zero_row(task, str(exc)), "log": ""}
    try:
        out = evaluate_here(task)
    except ScenarioError as exc:  # its process failed building the policy
        out = zero_row(task, str(exc))
    finally:
        log = candidate.close()
    out["log"] = log
    if log:
        out["feedback"] += f"\n\nWhat the candidate printed:\n{log}"
    return out


def evaluate_here(task: Task) -> dict[str, Any]:
    try:
        result = run(task.scenario, seed=task.seed)
    except PolicyError as exc:  # a user policy failed while running: a zero, not a crash
        return zero_row(task, str(exc))
    return {**ids(task), **row(result)}


def ids(task: Task) -> dict[str, Any]:
    return {"scenario": task.scenario_name, "policy": task.policy_name, "seed": task.seed,
            "candidate_id": task.candidate_id}


def zero_row(task: Task, error: str) -> dict[str, Any]:
    """A run that produced no result: fitness 0, and why in `error`."""
    return {**ids(task), "policy_id": "", "workload_id": "", "error": error, "fitness": 0.0,
            "completion": 0.0, "feedback": f"the candidate scored 0: {error}"}


def row(result: Result) -> dict[str, Any]:
    """A run's columns after its ids: policy and workload ids, error (empty), fitness,
    completion, each normalised objective (`objective.<key>`), the measurement window
    (`window_start_s`, `window_end_s`: null for the run's end), every scalar of the summary,
    the RawMetrics scalars the summary lacks, anomaly counts (`anomaly.<kind>`) and the number
    of warnings, then the feedback text for reflection."""
    evaluation = result.evaluation
    assert evaluation is not None
    out: dict[str, Any] = {"policy_id": evaluation.policy_id,
                           "workload_id": evaluation.workload_id, "error": "",
                           "fitness": evaluation.fitness, "completion": evaluation.completion}
    out.update({f"objective.{k}": v for k, v in evaluation.objectives.items()})
    window = result.scenario.evaluation.window
    out["window_start_s"], out["window_end_s"] = window.warmup_s, window.end_s
    summary = {k: v for k, v in result.summary.items() if scalar(v) and k != "instance_id"}
    out.update(summary)
    out.update({k: v for k, v in result.metrics.items() if scalar(v) and k not in summary})
    out.update({f"anomaly.{k}": v for k, v in sorted(result.metrics["anomalies"].items())})
    out["warnings"] = len(result.warnings)
    out["feedback"] = feedback(result)
    return out


def scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)
