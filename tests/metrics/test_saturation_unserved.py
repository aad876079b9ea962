"""The verdict counts the requests a run did not serve (session 20's newcomer: the quickstart
at 34 req/s with a 2 s client timeout had 83 % of its requests time out in service and was
called sustainable, STABLE); and a run that preempts sizes the step-cost model's batches by
the KV its running requests held (search-routing on 5 replicas: the model read 197 req/s, the
run measured 113 at saturation, and the warning blamed the routing)."""

from __future__ import annotations

import pytest

from blis_simpy.api import run
from blis_simpy.metrics.saturation import OVERLOADED, spread_capacity
from blis_simpy.sim.output import OutputFolder
from blis_simpy.sim.run import prepare, simulate


def timeouts(rate: float) -> dict[str, float]:
    return {"workload.rate_per_s": rate, "workload.timeout_s": 2}


@pytest.fixture(scope="module")
def timed_out():
    return run("quickstart", overrides=timeouts(34))


def test_timeouts_make_a_run_unsustainable(timed_out):
    summary = timed_out.summary
    verdict = summary["saturation"]
    assert summary["timed_out_requests"] > 0.8 * summary["arrived_requests"]
    assert verdict["verdict"] == "saturated" and verdict["level"] == OVERLOADED
    assert verdict["unserved_rate_per_s"] > 0.8 * verdict["offered_rate_per_s"]
    assert "not served" in verdict["unserved"]
    assert verdict["headroom"] <= 0
    assert any(w.startswith("saturated") and "not served" in w for w in timed_out.warnings)
    text = timed_out.summary_text()
    assert text.startswith("**SATURATED**") and "describe only the requests served" in text


def test_the_fitness_reads_the_capacity_not_the_requests_served(timed_out):
    """Completions measure what was served when requests not served made the queue: the
    fitness's `sustained` reads the step-cost model's capacity (about the offered load here),
    not the 17 % that completed, which the completion rate already charges."""
    verdict = timed_out.summary["saturation"]
    assert timed_out.evaluation.sustained == pytest.approx(
        verdict["capacity_model_per_s"] / verdict["offered_rate_per_s"])
    assert timed_out.evaluation.sustained > 0.9


def test_timeouts_at_light_load_are_not_blamed_on_capacity_or_routing():
    """At 6 req/s the 2 s timeout is shorter than many requests take on an idle replica: the
    run is still unsustainable (46 % fail), but the sustainable rate stays the model's and
    nothing says routing concentrated the load."""
    run_ = run("quickstart", overrides=timeouts(6))
    verdict = run_.summary["saturation"]
    assert verdict["verdict"] == "saturated"
    assert "not for lack of capacity" in verdict["unserved"]
    assert verdict["max_sustainable_rate_per_s"] == verdict["capacity_model_per_s"]
    assert verdict["measured_rate_per_s"] < verdict["served_rate_per_s"] * 1.2
    assert spread_capacity(verdict) is None
    assert "routing concentrated" not in " ".join(run_.warnings)
    # finalcheck 20: the focus said "Add instances" and "Find what causes overload" too
    focus = run_.summary_text().partition("Suggested Focus")[2]
    assert "timeout longer than the requests take" in focus
    assert "Add" not in focus and "Find what causes" not in focus
    text = run_.summary_text()
    assert "saturated by requests not served, not for lack of capacity" in text
    assert "Add capacity" not in text and "unevenly routed" not in text


def test_streamed_runs_count_unserved_requests_alike(timed_out, tmp_path):
    streamed = simulate(prepare("quickstart", overrides=timeouts(34)),
                        folder=OutputFolder(tmp_path, "csv"), record_mode="stream"
                        ).summary["saturation"]
    memory = timed_out.summary["saturation"]
    for key in ("verdict", "level", "unserved_rate_per_s", "queue_growth_per_s"):
        assert streamed[key] == pytest.approx(memory[key])


@pytest.mark.parametrize("replicas", [4, 5])
def test_a_run_that_preempts_sizes_the_capacity_models_batches_by_the_kv_it_held(replicas):
    """search-routing's shared prefixes stay cached beside the batch: the model's batches,
    sized by the uncached prompt and half the output, were twice those the pool held (its
    running requests held 1,105-1,177 tokens each, against 533 assumed; 197 req/s on 5
    replicas, 156 on 4, against 113 and 98.8 measured at saturation), and the warning blamed
    the routing. Sized by the KV a running request held, it reads within 10 %."""
    result = run("search-routing", overrides={"cluster.instances": replicas})
    verdict = result.summary["saturation"]
    assert result.summary["preemption_count"] > 0
    assert verdict["max_sustainable_method"].startswith("measured")
    assert "measured: the run preempted" in verdict["capacity_model"]
    assert verdict["capacity_model_per_s"] == pytest.approx(
        verdict["max_sustainable_rate_per_s"], rel=0.1)
    assert "routing concentrated" not in " ".join(result.warnings)
    assert "unevenly routed" not in result.summary_text()


def test_a_run_without_failures_keeps_its_verdict():
    verdict = run("quickstart").summary["saturation"]
    assert verdict["verdict"] == "sustainable"
    assert "unserved_rate_per_s" not in verdict and "unserved" not in verdict


@pytest.mark.parametrize("cls, warned", [("standard", True), ("default", False)])
def test_slo_targets_of_a_class_no_request_carries_are_said_to_be_unused(cls, warned):
    """Finalcheck 20: targets for `standard` on a workload whose requests carry no class (the
    class "default") were ignored without a word, and a fitness weighting SLO attainment
    scored 0."""
    result = run("quickstart", overrides={"workload.num_requests": 60,
                                          f"evaluation.slo_targets.{cls}.ttft_ms": 200})
    said = [w for w in result.warnings if "no request carried" in w]
    assert bool(said) == warned
    if warned:
        assert "'standard'" in said[0] and "'default'" in said[0]
