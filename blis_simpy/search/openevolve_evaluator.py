"""OpenEvolve integration (`pip install blis-simpy[search]`): an evaluator on OpenEvolve's
contract, `evaluate(program_path) -> EvaluationResult`.

The evolved program is a code policy for one axis (`blis_simpy.search.code`), or a policy
bundle when the file ends in .yaml. Its metrics carry `combined_score` (the mean fitness over
the scenarios), the mean of each raw metric, and the feature dimensions MAP-Elites bins on
(raw values, as OpenEvolve wants); its artifacts carry the runs' feedback, the errors if any,
what a code candidate printed (`log`), and the K.4 export of the candidate. Code runs in the
sandbox (docs/security.md); a machine without one raises SandboxUnavailable rather than
score every program 0. Cascade: `evaluate_stage1` runs one cheap scenario first
(the first scenario with its first seed), `evaluate_stage2` the whole set.

`examples/openevolve/evaluator.py` is a template binding these to a workload.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from openevolve.evaluation_result import EvaluationResult

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.policies.bundle import AXES, PolicyBundle
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.contain import Limits, SandboxUnavailable
from blis_simpy.search.export import k4_export
from blis_simpy.search.store import RunStore
from blis_simpy.search.sweep import Candidate, check_inputs, checked_seeds, run_many
from blis_simpy.sim.run import load

REPORTED = ("fitness", "completion", "ttft_mean_ms", "ttft_p99_ms", "e2e_mean_ms",
            "e2e_p99_ms", "tokens_per_sec", "cache_hit_rate", "preemption_count")


class BlisEvaluator:
    """Scores programs on `scenarios` x `seeds` (each scenario's own seed by default). Every
    run goes through a run store (`store`: a file, so an evolution killed and started again
    skips what it has done; default in memory): a program evaluated again and the default
    score's baseline runs are served from it."""

    def __init__(self, scenarios: Sequence[Scenario | str | Path], axis: str = "routing",
                 seeds: Sequence[int] | None = None,
                 features: Sequence[str] = ("cache_hit_rate", "completion"),
                 limits: Limits | None = None, workers: int = 1,
                 store: str | Path | None = None) -> None:
        if axis not in AXES:
            raise ScenarioError("axis", f"{axis!r} is not a policy axis", ", ".join(AXES))
        self.scenarios = [load(s) for s in scenarios]
        check_inputs({f"scenarios[{i}]": s for i, s in enumerate(self.scenarios)})
        self.axis, self.seeds = axis, checked_seeds("seeds", seeds)
        self.features, self.limits, self.workers = tuple(features), limits, workers
        self.store = RunStore(":memory:" if store is None else store)

    def evaluate(self, program_path: str) -> EvaluationResult:
        """Every scenario and seed."""
        return self.score(program_path, self.scenarios, self.seeds)

    def evaluate_stage1(self, program_path: str) -> EvaluationResult:
        """The cascade's cheap first stage: one scenario, one seed."""
        first = self.scenarios[0]
        return self.score(program_path, [first],
                          [self.seeds[0] if self.seeds else first.seed])

    def evaluate_stage2(self, program_path: str) -> EvaluationResult:
        return self.evaluate(program_path)

    def score(self, program_path: str, scenarios: list[Scenario], seeds: list[int] | None
              ) -> EvaluationResult:
        try:
            candidate = self.candidate(Path(program_path))
            table = run_many({f"{i}:{s.name}": s for i, s in enumerate(scenarios)},
                             {"candidate": candidate}, seeds, workers=self.workers,
                             limits=self.limits, store=self.store)
        except SandboxUnavailable:
            raise  # not the candidate's fault: every code candidate would score 0
        except ScenarioError as exc:
            return EvaluationResult(
                metrics={"combined_score": 0.0, **dict.fromkeys(self.features, 0.0)},
                artifacts={"error": str(exc), "feedback": f"the candidate scored 0: {exc}"})
        rows = cast(list[dict[str, Any]], table.to_dict("records"))
        metrics = {"combined_score": mean([r["fitness"] for r in rows])}
        for column in (*REPORTED, *self.features):
            values = [r.get(column) for r in rows]
            metrics[column] = mean(values)
        artifacts = {"feedback": "\n\n".join(f"{r['scenario']} seed {r['seed']}:\n"
                                             f"{r['feedback']}" for r in rows),
                     "k4_export": json.dumps(k4_export(best(rows), candidate), default=str)}
        errors = [r["error"] for r in rows if r["error"]]
        if errors:
            artifacts["error"] = "\n".join(errors)
        printed = [f"{r['scenario']} seed {r['seed']}:\n{r['log']}" for r in rows
                   if isinstance(r.get("log"), str) and r["log"]]
        if printed:
            artifacts["log"] = "\n\n".join(printed)
        return EvaluationResult(metrics=metrics, artifacts=artifacts)

    def candidate(self, path: Path) -> Candidate:
        text = read_text(path, "program", "a policy bundle YAML or Python file")
        if path.suffix in (".yaml", ".yml"):
            return PolicyBundle.from_yaml(path)
        return CodePolicy(self.axis, text, id=path.stem)


def mean(values: list[Any]) -> float:
    """The mean of the finite values; 0 when there is none (OpenEvolve bins on numbers)."""
    finite = [float(v) for v in values
              if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else 0.0


def best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return max(rows, key=lambda r: r["fitness"])
