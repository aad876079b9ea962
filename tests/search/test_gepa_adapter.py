"""GEPA on its real API: the adapter's contract, and an offline `gepa.optimize` run whose
scripted proposer (no LLM) reads the feedback and improves a routing policy."""

from __future__ import annotations

import gepa
import pytest
import yaml

from blis_simpy.core.errors import ScenarioError
from blis_simpy.search.gepa_adapter import BlisAdapter, evaluator
from blis_simpy.sim.run import load
from tests.search.helpers import prefix_scenario

SEED_BUNDLE = yaml.safe_dump({"id": "seed", "routing": {"type": "weighted", "params": {
    "scorers": {"queue-depth": 1.0, "prefix-affinity": 0.5}}}})


def workloads(seeds):
    return [load(prefix_scenario(), seed=s) for s in seeds]


def test_evaluate_returns_one_score_and_trajectory_per_instance():
    batch = workloads([1, 2])
    result = BlisAdapter(workers=1).evaluate(batch, {"bundle": SEED_BUNDLE},
                                             capture_traces=True)
    assert isinstance(result, gepa.EvaluationBatch)
    assert len(result.scores) == len(result.outputs) == len(result.trajectories) == 2
    assert all(score > 0 for score in result.scores)
    dataset = BlisAdapter().make_reflective_dataset({"bundle": SEED_BUNDLE}, result, ["bundle"])
    record = dataset["bundle"][0]
    assert record["Inputs"]["seed"] == 1 and "Cache hit rate" in record["Feedback"]


def test_broken_candidates_score_zero_with_the_reason():
    adapter = BlisAdapter(workers=1)
    batch = workloads([1])
    bad_yaml = adapter.evaluate(batch, {"bundle": "routing: {type: nope}"}, True)
    assert bad_yaml.scores == [0.0]
    assert "unknown routing policy 'nope'" in bad_yaml.trajectories[0]["feedback"]
    bad_code = adapter.evaluate(batch, {"routing": "import os\n"}, True)
    assert bad_code.scores == [0.0] and "import os" in bad_code.trajectories[0]["feedback"]
    unknown = adapter.evaluate(batch, {"prompt": "x"}, True)
    assert unknown.scores == [0.0] and "unknown candidate component" in \
        unknown.trajectories[0]["feedback"]


def test_a_bundle_whose_text_names_proc_self_mem_is_scored_not_raised():
    """newcomer 20 #3: a decision tree comparing the tenant with "/proc/self/mem" made the
    run store's key read that file, and the adapter (which never raises) raised OSError."""
    tree = {"if": {"signal": "request.tenant", "op": "==", "value": "/proc/self/mem"},
            "then": {"scorer": "prefix-affinity", "weight": 2},
            "else": {"scorer": "load-balance"}}
    bundle = yaml.safe_dump({"routing": {"type": "decision-tree", "params": {"tree": tree}}})
    result = BlisAdapter(workers=1).evaluate(workloads([1]), {"bundle": bundle})
    assert result.scores[0] > 0


def test_a_batch_whose_trace_cannot_be_read_is_the_users_error_not_a_zero():
    """The same for every candidate: scoring each 0 would hide it for a whole search."""
    from blis_simpy.config.scenario import Scenario

    data = {**prefix_scenario().to_dict(), "workload": {"type": "trace",
                                                        "path": "/proc/self/mem"}}
    with pytest.raises(ScenarioError, match=r"batch\[0\]: workload.path: cannot read"):
        BlisAdapter(workers=1).evaluate([Scenario.from_dict(data)], {"bundle": SEED_BUNDLE})


def test_optimize_anything_style_evaluator():
    evaluate = evaluator(workloads([1]))
    score, side_info = evaluate({"bundle": SEED_BUNDLE})
    assert score > 0 and "TTFT" in side_info["feedback"]


def raise_prefix_weight(candidate, reflective_dataset, components_to_update):
    """The scripted proposer: when the feedback shows a cold prefix cache, weight the
    prefix-affinity scorer 4x more (what a reflecting LLM would be expected to try)."""
    bundle = yaml.safe_load(candidate["bundle"])
    hit_rates = [float(line.split("Cache hit rate ")[1].split("%")[0]) / 100
                 for record in reflective_dataset["bundle"]
                 for line in record["Feedback"].splitlines() if "Cache hit rate" in line]
    scorers = bundle["routing"]["params"]["scorers"]
    if hit_rates and min(hit_rates) < 0.8:
        scorers["prefix-affinity"] *= 4
    bundle["parent_id"], bundle["id"] = bundle["id"], f"{bundle['id']}+"
    return {"bundle": yaml.safe_dump(bundle)}


def test_offline_gepa_optimize_improves_routing_on_a_prefix_heavy_workload(tmp_path):
    trainset = workloads([1, 2])
    result = gepa.optimize(
        seed_candidate={"bundle": SEED_BUNDLE}, trainset=trainset, valset=trainset,
        adapter=BlisAdapter(workers=2), custom_candidate_proposer=raise_prefix_weight,
        max_metric_calls=12, reflection_minibatch_size=2, run_dir=str(tmp_path / "gepa"),
        seed=0)
    scores = result.val_aggregate_scores
    assert scores[result.best_idx] > scores[0]  # the best beats the seed candidate
    best = yaml.safe_load(result.best_candidate["bundle"])
    assert best["routing"]["params"]["scorers"]["prefix-affinity"] > 0.5


def test_batch_evaluate_equals_one_evaluate_per_pair():
    batch = workloads([1, 2])
    other = yaml.safe_dump({"routing": {"type": "prefix-affinity"}})
    adapter = BlisAdapter(workers=2)
    together = adapter.batch_evaluate([({"bundle": SEED_BUNDLE}, batch),
                                       ({"bundle": other}, batch[:1])])
    assert [r.scores for r in together] == [
        adapter.evaluate(batch, {"bundle": SEED_BUNDLE}).scores,
        adapter.evaluate(batch[:1], {"bundle": other}).scores]


@pytest.mark.parametrize("candidate, needle", [
    ({"bundle": 123}, "bundle: a int, not text"),
    ({"routing": None}, "routing: a NoneType, not text"),
    ({"routing": b"class P: pass"}, "routing: a bytes, not text"),
    (["routing"], "candidate: a list, not a mapping"),
])
def test_a_candidate_of_the_wrong_type_scores_zero_with_its_reason(candidate, needle):
    """newcomer 17's #8: these raised bare TypeError / AttributeError."""
    adapter = BlisAdapter(workers=1)
    result = adapter.evaluate([load("quickstart", seed=1)], candidate, capture_traces=True)
    assert result.scores == [0.0]
    assert needle in result.trajectories[0]["error"]


def test_a_batch_item_that_is_not_a_scenario_is_refused_by_position():
    with pytest.raises(ScenarioError, match=r"batch\[1\]: a dict, not a Scenario"):
        BlisAdapter(workers=1).evaluate([load("quickstart", seed=1), {"name": "x"}], {})
