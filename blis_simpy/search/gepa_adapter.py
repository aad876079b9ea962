"""GEPA integration (`pip install blis-simpy[search]`): the simulator as GEPA's fitness function.

A GEPA candidate is a mapping of named text components. Here a component named `bundle` holds
a policy bundle in YAML (`blis_simpy.policies.bundle`), and a component named after a policy
axis (`routing`, `admission`, ...) holds code-policy source for that axis
(`blis_simpy.search.code`), run in the sandbox (docs/security.md). A data instance is a
scenario (with its seed): evaluating a candidate on a batch runs it on each, through the
sweep's executor, and scores each run by its fitness. Failures (a bundle that does not load,
code that is refused or crashes) score 0 with the reason in the feedback; they never raise.
A batch's own fault (an item that is not a Scenario, a trace it names that cannot be read)
raises ScenarioError: it is the user's, the same for every candidate.
A machine without the sandbox raises SandboxUnavailable: no code candidate could score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from gepa import EvaluationBatch

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.search.code import BUNDLE, candidate_policy
from blis_simpy.search.contain import Limits, SandboxUnavailable
from blis_simpy.search.store import RunStore
from blis_simpy.search.sweep import Task, check_inputs, execute, plan, worker_pool

Trajectory = dict[str, Any]  # the run's row: metrics, fitness, error and feedback


class BlisAdapter:
    """GEPA's `GEPAAdapter` for policy search: `evaluate`, `batch_evaluate` (every pair in one
    sweep, on `executor` or a process pool of `workers` kept for the adapter's life) and
    `make_reflective_dataset`. Every run goes through a run store (`store`: a file, so a
    search killed and started again skips what it has done; default in memory), so a
    candidate proposed twice and the baseline of the default score are run once."""

    propose_new_texts = None  # GEPA's proposer (an LLM, or a custom_candidate_proposer)

    def __init__(self, executor: Executor | None = None, workers: int | None = None,
                 limits: Limits | None = None, store: str | Path | None = None) -> None:
        self.workers, self.limits = workers, limits or Limits()
        self.store = RunStore(":memory:" if store is None else store)
        self.executor = executor
        if executor is None and workers != 1:
            self.executor = worker_pool(workers)  # warm for the whole search

    def evaluate(self, batch: list[Scenario], candidate: dict[str, str],
                 capture_traces: bool = False) -> EvaluationBatch[Trajectory, Trajectory]:
        result = self.batch_evaluate([(candidate, batch)])[0]
        if not capture_traces:
            result.trajectories = None
        return result

    def batch_evaluate(self, items: list[tuple[dict[str, str], list[Scenario]]]
                       ) -> list[EvaluationBatch[Trajectory, Trajectory]]:
        """Every (candidate, batch) pair in one sweep, so all runs share the workers."""
        tasks: list[Task] = []
        spans: list[tuple[int, str]] = []  # (runs, why the candidate failed)
        for candidate, batch in items:
            for i, scenario in enumerate(batch):
                if not isinstance(scenario, Scenario):
                    raise ScenarioError(f"batch[{i}]", f"a {type(scenario).__name__}, not a "
                                        "Scenario", "scenarios from blis_simpy.load(...)")
            check_inputs({f"batch[{i}]": s for i, s in enumerate(batch)})  # the user's
            try:
                policy = candidate_policy(candidate)
                scenarios = {f"{i}:{s.name}": s for i, s in enumerate(batch)}
                planned = plan(scenarios, {"candidate": policy}, None, self.limits)
                tasks.extend(dataclasses.replace(t, index=len(tasks) + k)
                             for k, t in enumerate(planned))
                spans.append((len(batch), ""))
            except SandboxUnavailable:
                raise  # not the candidate's fault: every code candidate would score 0
            except ScenarioError as exc:
                spans.append((len(batch), f"the candidate does not load: {exc}"))
        rows = iter(execute(tasks, self.executor, self.workers, None, self.store))
        out = []
        for count, error in spans:
            runs = [failed(error)] * count if error else [next(rows) for _ in range(count)]
            out.append(EvaluationBatch(outputs=runs, scores=[float(r["fitness"]) for r in runs],
                                       trajectories=runs))
        return out

    def make_reflective_dataset(self, candidate: dict[str, str],
                                eval_batch: EvaluationBatch[Trajectory, Trajectory],
                                components_to_update: list[str]
                                ) -> dict[str, list[dict[str, Any]]]:
        """Per component, one record per run: the scenario and seed, the score, and the run's
        feedback (metrics, anomalies, warnings, or why it failed)."""
        records = [{"Inputs": {"scenario": run.get("scenario", ""), "seed": run.get("seed")},
                    "Generated Outputs": {"fitness": run["fitness"]},
                    "Feedback": run["feedback"]}
                   for run in eval_batch.trajectories or eval_batch.outputs]
        return {component: records for component in components_to_update}


def failed(error: str) -> Trajectory:
    return {"fitness": 0.0, "error": error, "feedback": f"the candidate scored 0: {error}"}


def evaluator(scenarios: Sequence[Scenario], limits: Limits | None = None
              ) -> Callable[..., tuple[float, dict[str, Any]]]:
    """An `optimize_anything`-style evaluator: `evaluate(candidate) -> (score, side_info)`,
    the mean fitness over `scenarios` (run one after another in this process; use
    `BlisAdapter.batch_evaluate` to fan out)."""
    adapter = BlisAdapter(workers=1, limits=limits)

    def evaluate(candidate: str | dict[str, str], example: Any = None,
                 **_: Any) -> tuple[float, dict[str, Any]]:
        components = {BUNDLE: candidate} if isinstance(candidate, str) else candidate
        batch = [example] if isinstance(example, Scenario) else list(scenarios)
        result = adapter.evaluate(batch, components, capture_traces=True)
        score = sum(result.scores) / len(result.scores)
        runs = result.trajectories or []
        return score, {"scores": result.scores,
                       "feedback": "\n\n".join(str(r["feedback"]) for r in runs)}

    return evaluate
