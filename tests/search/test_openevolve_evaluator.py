"""OpenEvolve on its real API: the evaluator's contract, the example template, and an offline
`run_evolution` with a mock LLM client that improves a routing policy."""

from __future__ import annotations

import json
from pathlib import Path

import openevolve
from openevolve.config import LLMModelConfig, load_config
from openevolve.evaluation_result import EvaluationResult
from openevolve.llm.base import LLMInterface

from blis_simpy.search.openevolve_evaluator import BlisEvaluator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openevolve"
EVOLVED = (Path(__file__).parent / "prefix_owner_policy.py").read_text()


def test_evaluate_returns_combined_score_features_and_artifacts():
    blis = BlisEvaluator([EXAMPLE / "workload.yaml"], seeds=[1, 2])
    result = blis.evaluate(str(EXAMPLE / "initial_program.py"))
    assert isinstance(result, EvaluationResult)
    metrics = result.metrics
    assert metrics["combined_score"] > 0
    assert 0 < metrics["cache_hit_rate"] < 1 and metrics["completion"] > 0  # MAP-Elites dims
    assert "ttft_p99_ms" in metrics and "error" not in result.artifacts
    assert "Cache hit rate" in result.artifacts["feedback"]
    export = json.loads(result.artifacts["k4_export"])
    assert export["policy_id"] == "initial_program"
    assert export["config_for_deployment"]["axis"] == "routing"
    # the example has no weights: the default score's terms against round robin
    assert set(export["sim_fitness"]) == {"fitness", "ttft_mean", "ttft_p99", "e2e_mean",
                                          "e2e_p99", "throughput"}


def test_cascade_stage1_is_one_cheap_run(tmp_path):
    blis = BlisEvaluator([EXAMPLE / "workload.yaml"], seeds=[1, 2])
    stage1 = blis.evaluate_stage1(str(EXAMPLE / "initial_program.py"))
    assert stage1.artifacts["feedback"].count("seed ") == 1


def test_hostile_or_unreadable_program_scores_zero(tmp_path):
    blis = BlisEvaluator([EXAMPLE / "workload.yaml"])
    hostile = tmp_path / "hostile.py"
    hostile.write_text("import socket\n")
    result = blis.evaluate(str(hostile))
    assert result.metrics["combined_score"] == 0 and "import socket" in result.artifacts["error"]
    missing = blis.evaluate(str(tmp_path / "missing.py"))
    assert missing.metrics == {"combined_score": 0.0, "cache_hit_rate": 0.0, "completion": 0.0}


class ScriptedLLM(LLMInterface):
    """Stands in for the LLM: answers every request with one rewrite, the prefix-owner
    policy, as a model that read the feedback (a cold prefix cache) might."""

    def __init__(self, config=None) -> None:
        self.model = "scripted"  # OpenEvolve's ensemble logs vars(client)["model"]

    async def generate(self, prompt, **kwargs):
        return await self.generate_with_context("", [{"role": "user", "content": prompt}])

    async def generate_with_context(self, system_message, messages, **kwargs):
        return f"Route by prefix owner.\n```python\n{EVOLVED}```\n"


def scripted_client(config):
    return ScriptedLLM(config)


def test_offline_run_evolution_improves_routing_on_a_prefix_heavy_workload(tmp_path):
    config = load_config(str(EXAMPLE / "config.yaml"))
    config.llm.models = [LLMModelConfig(name="scripted", init_client=scripted_client)]
    config.llm.evaluator_models = []
    config.database.num_islands = 1
    config.evaluator.parallel_evaluations = 1
    config.log_level = "WARNING"
    seed_score = BlisEvaluator([EXAMPLE / "workload.yaml"], seeds=[1, 2]).evaluate(
        str(EXAMPLE / "initial_program.py")).metrics["combined_score"]
    result = openevolve.run_evolution(
        initial_program=str(EXAMPLE / "initial_program.py"),
        evaluator=str(EXAMPLE / "evaluator.py"), config=config, iterations=2,
        output_dir=str(tmp_path / "oe"), cleanup=False)
    assert result.best_score > seed_score  # the best beats the seed program
    assert "prefix owner" in result.best_code


def test_the_example_workload_is_stable_and_scored_by_the_default_score():
    """newcomer 16's #13: examples/openevolve/workload.yaml was saturated (60 req/s offered,
    about 34 sustained) and weighted mean_ttft by 1/(1+ms), the normalisation the guide says
    the default score replaced (round robin 0.000405, least-loaded 0.000589)."""
    from blis_simpy.api import load, run

    scenario = load(EXAMPLE / "workload.yaml")
    assert scenario.fitness.weights == {}
    for seed in (1, 2, 3):
        result = run(scenario, seed=seed)
        assert result.summary["saturation"]["verdict"] == "sustainable", result.warnings
        assert result.warnings == []
