"""Sweeps: every (scenario, policy, seed) run on a pool of worker processes, one tidy table.

A policy search calls the simulator thousands of times, so a sweep is the unit of work:
scenarios are parsed and every candidate is validated once, in the caller, before any run
starts (a bad candidate fails the sweep at once, naming it); the runs then go to an executor
whose worker processes stay up for the whole sweep, and each worker draws and hashes a
(workload, seed)'s requests once for all the runs it gets (`workload/prepared.py`). A run
whose user policy fails while running becomes a row with the error and fitness 0, so a
search goes on past a broken candidate.

Common random numbers: a run's workload comes from its scenario and seed alone (the named
random streams of `blis_simpy.rng`), so the same seed gives every policy the same requests,
and differences between policies are paired (`compare_policies`).

Fitness: with `fitness.weights` a run's own weighted score; without, the default score,
relative to the scenario's own policies run on the same seeds (`metrics/fitness.py`): the
sweep runs that baseline too (once per scenario and seed) and scores every row against it.

Every run has a content key (`store.run_key`): runs with the same key are run once, and with a
`store` each finished row is on disk at once, so a sweep started again skips what is done.

Rows never depend on the executor, the number of workers or the store: they are built from
each run's records only (no wall time), returned in job order, and always as the store would
give them back (`store.normalised`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import multiprocessing
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.arguments import callback, instance, integer, integers
from blis_simpy.core.errors import PolicyError, ScenarioError
from blis_simpy.core.schema import scalar as schema_scalar
from blis_simpy.metrics.evaluation import relative_terms
from blis_simpy.metrics.fitness import Term, evenness, relative_score
from blis_simpy.policies.autoscale import AUTOSCALE
from blis_simpy.policies.bundle import AXES, REGISTRIES, PolicyBundle
from blis_simpy.search.code import CodePolicy, CodeRejected, check
from blis_simpy.search.contain import Limits, SandboxUnavailable, pool_worker, sandbox_checked
from blis_simpy.search.feedback import feedback
from blis_simpy.search.remote import Contained
from blis_simpy.search.store import RunStore, normalised, referenced, run_key
from blis_simpy.sim.build import build
from blis_simpy.sim.modes import mode_of
from blis_simpy.sim.result import Result
from blis_simpy.sim.run import ScenarioForm, load, simulate
from blis_simpy.workload.prepared import WorkloadCache

SURROGATES = re.compile("[\ud800-\udfff]")

if TYPE_CHECKING:
    import pandas as pd

# None: the scenario's own policies
Candidate = PolicyBundle | CodePolicy | Mapping[str, Any] | None
Progress = Callable[[int, int], None]  # (runs done, runs in all)
ID_COLUMNS = ("scenario", "policy", "seed", "candidate_id", "policy_id", "workload_id",
              "error", "fitness", "completion")
LABELS = ID_COLUMNS[:4]  # what the caller named a run: not part of its content
BASELINE = "(baseline)"  # the policy label of a run only the default score needs
# This worker's prepared workloads: the requests of each (workload, seed) it has run, drawn
# and hashed once (a memo of deterministic data: a run is the same with or without it).
WORKLOADS = WorkloadCache()


@dataclass(frozen=True)
class Task:
    """One run, with everything a worker needs: picklable, no file to read."""

    index: int
    scenario_name: str
    policy_name: str
    seed: int
    scenario: Scenario  # validated, resolved, with the candidate's overrides and the seed
    candidate_id: str
    code: CodePolicy | None = None  # run contained, within `limits`
    limits: Limits = field(default_factory=Limits)
    rejected: str = ""  # why the static check refused the code: the row is a zero
    key: str = ""  # the run's content key (store.run_key)
    terms: tuple[Term, ...] = ()  # the default score's terms; () with fitness weights
    baseline_key: str = ""  # the key of the run it is scored against (with `terms`)
    baseline: bool = False  # run only to score the others against (not a row of the table)


def run_many(scenarios: ScenarioForm | Sequence[ScenarioForm] | Mapping[str, ScenarioForm],
             policies: Mapping[str, Candidate] | None = None,
             seeds: Iterable[int] | None = None, *,
             overrides: Mapping[str, Any] | None = None, executor: Executor | None = None,
             workers: int | None = None, progress: Progress | None = None,
             limits: Limits | None = None, store: str | Path | RunStore | None = None
             ) -> pd.DataFrame:
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
    core); `workers=1` runs them here, one after another. `store` (a file, made if new):
    every finished run is written there at once, and runs already there are not run again
    (`blis_simpy.search.store`). `progress(done, total)` is called once before any run (done:
    the runs the store held) and after each run."""
    instance("policies", policies if policies is not None else {}, Mapping,
             "a mapping of names to candidates, or None")
    workers = None if workers is None else integer("workers", workers, low=1)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ScenarioError("executor", f"expected a concurrent.futures.Executor, got "
                            f"{type(executor).__name__}", "an Executor, or None")
    callback("progress", progress, "a function taking (runs done, runs in all), or None")
    instance("limits", limits, (Limits, type(None)), "a Limits, or None")
    instance("store", store, (str, Path, RunStore, type(None)),
             "a file path, a RunStore, or None")
    tasks = plan(named_scenarios(scenarios, overrides), policies or {"scenario": None}, seeds,
                 limits or Limits())
    opened = RunStore(store) if isinstance(store, str | Path) else store
    try:
        # The table's pandas is imported while the workers run: they are forked without it,
        # and an evaluation never needs it (its feedback reads the run's columns).
        rows = execute(tasks, executor, workers, progress, opened,
                       meanwhile=lambda: importlib.import_module("pandas"))
    finally:
        if opened is not store and opened is not None:
            opened.close()
    import pandas as pd

    frame = pd.DataFrame(rows)
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
    """The candidate's bundle, parsed and validated (one built by hand too: it may name no
    `module:Class`)."""
    try:
        if isinstance(candidate, PolicyBundle):
            candidate.validate()
            return candidate
        return PolicyBundle.from_dict(candidate or {})
    except ScenarioError as exc:
        raise ScenarioError(f"policies[{name!r}].{exc.path}".rstrip("."), exc.problem,
                            exc.valid) from None


def plan(scenarios: Mapping[str, Scenario], policies: Mapping[str, Candidate],
         seeds: Iterable[int] | None, limits: Limits) -> list[Task]:
    """Every run, validated: a bad candidate or seed fails here, before any run starts; code
    the static check refuses becomes zero rows (a search produces such candidates). A
    scenario without fitness weights adds its baseline runs (`baseline=True`, at the end)."""
    seed_list = checked_seeds("seeds", seeds)
    check_inputs(scenarios)
    prepared = {name: prepare_candidate(name, c) for name, c in policies.items()}
    coded = any(code is not None and not rejected for _, _, code, rejected in prepared.values())
    # Code runs only in the sandbox: a machine without one refuses it before any run, checked
    # while the runs are planned.
    with sandbox_checked() if coded else contextlib.nullcontext():
        return planned(scenarios, prepared, seed_list, limits)


def planned(scenarios: Mapping[str, Scenario],
            prepared: Mapping[str, tuple[PolicyBundle | None, str, CodePolicy | None, str]],
            seed_list: list[int] | None, limits: Limits) -> list[Task]:
    """`plan`'s runs: each candidate on each scenario and seed, then the baselines."""
    tasks: list[Task] = []
    baselines: list[Task] = []
    for scenario_name, scenario in scenarios.items():
        terms = () if scenario.fitness.weights else relative_terms(scenario)
        scenario_seeds = seed_list if seed_list is not None else [scenario.seed]
        own: dict[int, Task] = {}
        if terms:
            for seed in scenario_seeds:
                base = apply(scenario, {}, seed, f"{scenario_name}: ")
                own[seed] = Task(0, scenario_name, BASELINE, seed, base, "",
                                 key=key(base, seed), baseline=True)
        baselines.extend(own.values())
        for policy_name, (bundle, candidate_id, code, rejected) in prepared.items():
            where = f"policies[{policy_name!r}] on {scenario_name}: "
            overrides = candidate_overrides(bundle, code, rejected, scenario, where)
            for n, seed in enumerate(scenario_seeds):
                applied = apply(scenario, overrides, seed, where, bundle,
                                check=() if n else (code.axis,) if code else ("",))
                tasks.append(Task(len(tasks), scenario_name, policy_name, seed, applied,
                                  candidate_id, code, limits, rejected,
                                  key(applied, seed, code, rejected, limits),
                                  terms, own[seed].key if terms else ""))
    return tasks + [dataclasses.replace(t, index=len(tasks) + i)
                    for i, t in enumerate(baselines)]


def checked_seeds(name: str, seeds: Iterable[int] | None) -> list[int] | None:
    """The seeds as a list, each a scenario's valid seed, none repeated (None: each
    scenario's own); a search command checks its user's seeds with this before it plans, so
    a bad one is refused, never scored as the candidate's failure."""
    if seeds is None:
        return None
    seed_list = integers(name, seeds)
    if not seed_list:
        raise ScenarioError(name, "empty: no run would be made",
                            "at least one seed, or None for each scenario's own")
    for i, seed in enumerate(seed_list):
        schema_scalar(int, seed, f"{name}[{i}]")  # a scenario's seed: at most 2**53 in size
    repeated = sorted(s for s, n in Counter(seed_list).items() if n > 1)
    if repeated:
        raise ScenarioError(name, f"{', '.join(map(str, repeated))} repeated: runs are "
                            "deterministic, so a repeated seed adds a copy, not a sample",
                            "each seed once")
    return seed_list


def candidate_overrides(bundle: PolicyBundle | None, code: CodePolicy | None, rejected: str,
                        scenario: Scenario, where: str) -> dict[str, Any]:
    """What a candidate changes in this scenario: its bundle's axes, and its code's axis."""
    try:
        overrides = {} if bundle is None else bundle.overrides(scenario)
    except ScenarioError as exc:
        raise ScenarioError(f"{where}{exc.path}", exc.problem, exc.valid) from None
    if code is not None and not rejected:
        overrides[f"policies.{code.axis}"] = {"type": code.type_name, "params": {}}
    return overrides


def apply(scenario: Scenario, overrides: Mapping[str, Any], seed: int, where: str,
          bundle: PolicyBundle | None = None, check: tuple[str, ...] = ()) -> Scenario:
    """The scenario as one run gets it: overrides and seed applied, defaults resolved. With
    `check`, every policy it names is also built once now, so a parameter its template does
    not take fails here, not in a worker (the axes in `check` are left out: a code
    candidate's module exists only where it runs)."""
    try:
        applied = resolve(load(scenario, seed=seed, overrides=overrides))
        if check:
            build_policies(applied, skip=check)
        return applied
    except ScenarioError as exc:
        if bundle is not None:
            exc = bundle.blame(exc, "")
        raise ScenarioError(f"{where}{exc.path}", exc.problem, exc.valid) from None


def build_policies(scenario: Scenario, skip: tuple[str, ...]) -> None:
    for axis in AXES:
        if axis not in skip:
            REGISTRIES[axis].create(getattr(scenario.policies, axis), f"policies.{axis}")
    scaler = None if scenario.deployment is None else scenario.deployment.autoscaler
    if scaler is not None:
        AUTOSCALE.create(scaler.policy, "deployment.autoscaler.policy")


def key(scenario: Scenario, seed: int, code: CodePolicy | None = None, rejected: str = "",
        limits: Limits | None = None) -> str:
    """The run's content key (`store.run_key`). A code candidate's limits are part of it: what
    it can allocate or compute changes what it does (newcomer 20 #6)."""
    identity = None if code is None else (code.axis, code.entry, code.source, rejected,
                                          dataclasses.asdict(limits or Limits()))
    return run_key(scenario, seed, identity)


def check_inputs(scenarios: Mapping[str, Scenario]) -> None:
    """Every file the scenarios' input fields name can be read (`store.referenced`, through
    the bounded reader). Checked before any candidate, here and by the search commands: an
    unreadable trace is the scenario's error, one line naming it and the field, never a
    candidate's zero (a candidate cannot change these fields)."""
    for name, scenario in scenarios.items():
        try:
            referenced(scenario)
        except ScenarioError as exc:
            raise ScenarioError(f"{name}: {exc.path}", exc.problem, exc.valid) from None


def prepare_candidate(name: str, candidate: Candidate
                      ) -> tuple[PolicyBundle | None, str, CodePolicy | None, str]:
    """(its bundle, candidate id, code or None, why the code was refused or "")."""
    if not isinstance(candidate, CodePolicy):
        bundle = candidate_bundle(name, candidate)
        return bundle, bundle.meta.id or "", None, ""
    others = None if candidate.bundle is None else candidate_bundle(name, candidate.bundle)
    return others, candidate.id, candidate, rejection(candidate)


def rejection(code: CodePolicy) -> str:
    try:
        check(code)
    except CodeRejected as exc:
        return str(exc)
    return ""


def execute(tasks: list[Task], executor: Executor | None, workers: int | None,
            progress: Progress | None, store: RunStore | None = None,
            meanwhile: Callable[[], object] = lambda: None) -> list[dict[str, Any]]:
    """Each task's row (baselines left out), in task order, whatever order the workers finish
    in, scored (`rescore`). A run is done once per content key: from the store when it is
    there, else on the workers, and then stored at once. `meanwhile` is called here once the
    runs are handed to the workers (or before they run here)."""
    found = {} if store is None else store.get(t.key for t in tasks)
    todo: dict[str, list[Task]] = {}
    for task in tasks:
        if task.key not in found:
            todo.setdefault(task.key, []).append(task)
    contents: dict[str, dict[str, Any]] = dict(found)
    total = len(tasks)
    done = total - sum(len(group) for group in todo.values())
    if progress is not None:  # (how many the store held: none, or a sweep resumed)
        progress(done, total)
    for run_key_, row in run_all([group[0] for group in todo.values()], executor, workers,
                                 meanwhile):
        content = normalised({k: v for k, v in row.items() if k not in LABELS})
        contents[run_key_] = content
        if store is not None and storable(todo[run_key_][0], content):
            store.put(run_key_, content)
        done += len(todo[run_key_])
        if progress is not None:
            progress(done, total)
    return rescore(tasks, contents)


def storable(task: Task, content: Mapping[str, Any]) -> bool:
    """Whether a row is the same whenever it is run: a contained code candidate's failure
    may depend on the machine (its wall-time budget, the memory left), so it is not kept."""
    return task.code is None or not content["error"] or bool(task.rejected)


def run_all(tasks: list[Task], executor: Executor | None, workers: int | None,
            meanwhile: Callable[[], object] = lambda: None
            ) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, row) of every task as it finishes: here, or on `executor` or a process pool;
    `meanwhile()` once every task is submitted."""
    count = workers or os.cpu_count() or 1
    if executor is None and (count == 1 or len(tasks) <= 1):
        meanwhile()
        for task in tasks:
            yield task.key, evaluate(task)
        return
    own = executor is None
    if own:
        share_workloads(tasks)
    pool = worker_pool(min(count, len(tasks))) if own else executor
    assert pool is not None
    try:
        futures: dict[Future[dict[str, Any]], str] = {
            pool.submit(evaluate, task): task.key for task in tasks}
        meanwhile()
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:
        if own:
            pool.shutdown(cancel_futures=True)


def share_workloads(tasks: Sequence[Task]) -> None:
    """Prepare each (workload, seed) of the tasks here, once, before the pool's workers fork:
    they inherit it (`WORKLOADS`) instead of each drawing and hashing the same requests on its
    first run. Only where workers fork (the default start method on Linux), and only as many
    as `WORKLOADS` keeps; a workload that cannot be prepared is left to the workers, whose
    runs fail as they would have."""
    method = multiprocessing.get_start_method(allow_none=True)  # (asking fixes nothing)
    if (method or multiprocessing.get_all_start_methods()[0]) != "fork":
        return
    firsts: dict[tuple[str, int], Task] = {}
    for task in tasks:
        if not task.rejected:
            firsts.setdefault((task.scenario_name, task.seed), task)
    if len(firsts) > WORKLOADS.size:
        return
    for task in firsts.values():
        try:
            WORKLOADS.get(task.scenario, reference_draws=mode_of(task.scenario).reference_draws)
        except Exception:  # the worker's run meets it again, and says so
            return


def worker_pool(workers: int | None) -> ProcessPoolExecutor:
    """A pool of `workers` processes (default: one per CPU), each taking a different CPU of
    this process's mask for its code candidates' sessions, and each ending with this process
    however it ends, its sandbox with it (`contain.pool_worker`)."""
    if not hasattr(os, "sched_getaffinity"):  # (no sandbox there, no sessions)
        return ProcessPoolExecutor(workers)
    return ProcessPoolExecutor(workers, initializer=pool_worker,
                               initargs=(os.getpid(), multiprocessing.Value("i", 0),
                                         sorted(os.sched_getaffinity(0))))


def rescore(tasks: list[Task], contents: Mapping[str, dict[str, Any]]
            ) -> list[dict[str, Any]]:
    """The rows of the non-baseline tasks, in order, from each run's content; where the
    default score applies, scored against the baseline run on the same seed: `fitness`, one
    `objective.<term>` column per term (the oriented ratio, > 1: better) and a line on top of
    the feedback. A failed run keeps its 0."""
    out = []
    for task in tasks:
        if task.baseline:
            continue
        row = {**ids(task), **contents[task.key]}
        if task.terms and not row["error"]:
            row = relative_row(row, contents[task.baseline_key], task.terms)
        out.append(row)
    return out


def relative_row(row: dict[str, Any], base: Mapping[str, Any], terms: tuple[Term, ...]
                 ) -> dict[str, Any]:
    scored = relative_score(row, base, terms)
    row = {**row, "fitness": scored.fitness}
    row.update({f"objective.{name}": ratio for name, ratio in scored.ratios.items()})
    changes = ", ".join(f"{name} x{ratio:.3f}" for name, ratio in scored.ratios.items())
    if row.get("sustained", 1.0) < 1.0:
        changes += f"; saturated: x{row['sustained']:.3f} for the load it could not sustain"
    even = evenness(row)
    if base.get("completed") != 0 and row.get("tenant_completion") is not None and even < 1.0:
        changes += (f"; x{even:.3f} for serving its tenants unevenly (the worst-served "
                    "tenant's completed share of its prompt and output tokens over every "
                    "tenant's)")
    shed = base.get("completion", 1.0) - row.get("completion", 1.0)
    if shed >= 0.005:
        changes += (f"; it completed {shed:.1%} fewer of the requests than the baseline: each "
                    "one it did not serve counts as an SLO miss and is charged its wait to the "
                    "run's end in the latency terms")
    if row.get("requests") == 0:
        changes += "; 0: no request arrived in the measurement window, nothing was measured"
    elif base.get("completed") == 0:
        changes += ("; the baseline completed nothing in the window, so only the work served "
                    "(and the cost) is compared")
    row["feedback"] = (f"Fitness {scored.fitness:.4g} against the scenario's own policies on "
                       f"the same requests (1 = as good; per term, > 1 is better: {changes})"
                       f"\n\n{row['feedback']}")
    return row


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
        out["feedback"] += ("\n\nWhat the candidate printed (its own output, not the "
                            f"evaluator's words):\n{fenced(log)}")
    return {key: plain(value) if isinstance(value, str) else value
            for key, value in out.items()}


def fenced(text: str) -> str:
    """`text` in a Markdown code block whose fence no line of it can close: what a candidate
    prints reaches the reflecting model as quoted output, never as headings or claims."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def plain(text: str) -> str:
    """`text` with every lone surrogate (a candidate's `print("\\ud800")` or exception
    text) as U+FFFD: JSON's strict readers refuse the escape Python would write for one."""
    return SURROGATES.sub("\ufffd", text)


def evaluate_here(task: Task) -> dict[str, Any]:
    scenario = task.scenario
    try:
        prepared = WORKLOADS.get(scenario, reference_draws=mode_of(scenario).reference_draws)
        result = simulate(build(scenario, prepared=prepared), series=False)  # (not in a row)
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
    completion, sustained (the saturation factor), tenant_completion (the default score's
    completion factor: the worst-served tenant's completed share of its work), each
    normalised objective
    (`objective.<key>`), the measurement window (`window_start_s`, `window_end_s`: null for
    the run's end), every scalar of the summary,
    the RawMetrics scalars the summary lacks, anomaly counts (`anomaly.<kind>`) and the number
    of warnings, then the feedback text for reflection."""
    evaluation = result.evaluation
    assert evaluation is not None
    out: dict[str, Any] = {"policy_id": evaluation.policy_id,
                           "workload_id": evaluation.workload_id, "error": "",
                           "fitness": evaluation.fitness, "completion": evaluation.completion,
                           "sustained": evaluation.sustained,
                           "tenant_completion": evaluation.tenant_completion}
    out.update({f"objective.{k}": v for k, v in evaluation.objectives.items()})
    window = result.scenario.evaluation.window
    out["window_start_s"], out["window_end_s"] = window.warmup_s, window.end_s
    summary = {k: v for k, v in result.summary.items() if scalar(v) and k != "instance_id"}
    out.update(summary)
    out.update({k: v for k, v in result.metrics.items() if scalar(v) and k not in summary})
    deployment = result.summary.get("deployment")
    if deployment is not None:
        out["cost"] = deployment["cost"]
    out.update({f"anomaly.{k}": v for k, v in sorted(result.metrics["anomalies"].items())})
    out["warnings"] = len(result.warnings)
    out.update({f"arrivals.{k}": v for k, v in (evaluation.arrivals or {}).items()})
    out["feedback"] = feedback(result)
    return out


def scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)
