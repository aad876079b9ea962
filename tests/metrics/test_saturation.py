"""The saturation verdict (summary.json `saturation`, metrics/saturation.py) and the headroom
planners read instead of utilization.

Definitions checked:
* over the measured arrivals, `offered_rate_per_s` = arrivals / span, `served_rate_per_s` =
  completions in the span / span, `queue_growth_per_s` = slope of the requests waiting to be
  served (arrived, not yet scheduled, rejected or timed out) over the span's second half;
* `saturated` when that growth exceeds 2 % of the offered rate with at least 10 requests (and
  1 % of the arrivals) waiting at the end; `undetermined` under 30 arrivals;
* `max_sustainable_rate_per_s`: measured (requests completing per second while requests
  waited, the span's middle through the drain) when the queue grew, else the step-cost model
  `capacity_model_per_s`; headroom = 1 - offered / max sustainable (the cases newcomer 18
  found wrong: test_saturation_cases.py);
* a saturated run warns, leads its summary text with the verdict and has its fitness scaled
  by sustainable / offered.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from blis_simpy.api import run
from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from tests.conftest import scenario

# Issue 31's first finding: one Llama-3.3-70B TP4 replica on H100 offered 8 req/s (1,500-token
# prompts, 512-token answers), far more than it sustains: about 4.5 req/s under native mode's
# physical step model with the KV cache that fits beside the weights (31,808 blocks; the
# catalog's blackbox coefficients and 128,273 blocks gave 5.8).
OVERLOAD = {
    "version": 1, "name": "overload", "seed": 42,
    "model": {"name": "meta-llama/llama-3.3-70b-instruct", "gpu": "H100", "tp": 4},
    "workload": {"type": "distribution", "num_requests": 800, "rate_per_s": 8,
                 "prompt": {"mean": 1500, "stdev": 256, "min": 2, "max": 7000},
                 "output": {"mean": 512, "stdev": 256, "min": 2, "max": 7000}},
}


def overload(rate: float = 8.0, **extra: object) -> Scenario:
    workload = {**OVERLOAD["workload"], "rate_per_s": rate}  # type: ignore[dict-item]
    return Scenario.from_dict({**OVERLOAD, "workload": workload, **extra})


@pytest.fixture(scope="module")
def saturated():
    return run(overload(fitness={"weights": {"throughput": 1.0, "p99_ttft": 1.0}}))


def test_overload_warns_and_leads_its_summary_with_the_saturation_verdict(saturated, tmp_path):
    verdict = saturated.summary["saturation"]
    assert verdict["verdict"] == "saturated"
    assert verdict["offered_rate_per_s"] == pytest.approx(8, rel=0.02)
    assert verdict["served_rate_per_s"] < 0.6 * verdict["offered_rate_per_s"]
    assert verdict["queue_growth_per_s"] > 1.0 and verdict["waiting_at_end"] > 100
    assert verdict["max_sustainable_method"].startswith("measured")
    assert 4.0 < verdict["max_sustainable_rate_per_s"] < 5.0
    assert verdict["headroom"] < -0.2
    warning = saturated.warnings[0]
    assert warning.startswith("saturated: offered 7.96 req/s")
    assert "growing queue" in warning
    text = saturated.summary_text()
    assert text.startswith("**SATURATED**: offered 7.96 req/s")
    assert "CAPACITY: saturated" in text and "Add capacity (about 2 instances" in text
    # ... and the same from the written folder (`blis-simpy summarize`)
    saturated.save(tmp_path / "out")
    printed = CliRunner().invoke(app, ["summarize", str(tmp_path / "out")])
    assert printed.exit_code == 0 and printed.stdout.startswith("**SATURATED**")


def test_a_saturated_run_scores_only_the_share_it_sustains(saturated):
    """Everything completes (the workload drains), so the completion rate is 1; the fitness
    is still scaled by the share of the offered load the system carries for good."""
    ev = saturated.evaluation
    verdict = saturated.summary["saturation"]
    assert ev.completion == 1.0
    assert ev.sustained == pytest.approx(verdict["max_sustainable_rate_per_s"]
                                         / verdict["offered_rate_per_s"])
    assert ev.fitness == pytest.approx(ev.sustained * sum(ev.objectives.values()))
    assert saturated.metrics["saturated"] is True
    calm = run(overload(4.0, fitness={"weights": {"throughput": 1.0}})).evaluation
    assert calm.sustained == 1.0 and calm.metrics["saturated"] is False


BLACKBOX = {"latency": {"type": "blackbox"}}


@pytest.fixture(scope="module")
def saturated_blackbox():
    return run(overload(**BLACKBOX))


@pytest.mark.parametrize("rate", [2.0, 4.0])
def test_capacity_model_matches_the_rate_measured_at_saturation(saturated_blackbox, rate):
    """Below the knee the highest sustainable rate comes from the step costs; with the
    blackbox model's own (linear) step costs it agrees with what the saturated run measured
    (requests completing while requests waited) to 3 %."""
    measured = saturated_blackbox.summary["saturation"]["max_sustainable_rate_per_s"]
    verdict = run(overload(rate, **BLACKBOX)).summary["saturation"]
    assert verdict["verdict"] == "sustainable"
    assert verdict["max_sustainable_method"] == "step-cost model"
    assert verdict["max_sustainable_rate_per_s"] == pytest.approx(measured, rel=0.03)
    assert verdict["headroom"] == pytest.approx(1 - rate / measured, abs=0.03)


@pytest.mark.parametrize("rate", [2.0, 4.0])
def test_capacity_model_of_the_physical_model_errs_high_by_at_most_20_percent(saturated, rate):
    """The physical model's step cost is not linear (weights or GEMMs, whichever binds; KV
    reads by context), so the estimate fits c0 + c1 x prefill + c2 x decodes on the light
    run's steps: that misses the larger batches' longer KV reads and overestimates what a
    replica sustains (70B TP4: +16 % at 2 req/s, +12 % at 4). Stated, bounded here, and to be
    replaced by the physical model's own step cost at the saturating batch."""
    measured = saturated.summary["saturation"]["max_sustainable_rate_per_s"]
    verdict = run(overload(rate)).summary["saturation"]
    assert verdict["verdict"] == "sustainable"
    assert verdict["max_sustainable_method"] == "step-cost model"
    assert measured < verdict["max_sustainable_rate_per_s"] < 1.2 * measured


def test_headroom_tracks_the_load_where_utilization_reads_one():
    """Issue 31: the busy fraction is ~1 at any load with continuous batching; the headroom
    falls as the load grows."""
    runs = {rate: run(scenario(workload={"num_requests": 600, "rate_per_s": rate}))
            for rate in (10, 80)}
    assert all(r.metrics["utilization"] > 0.9 for r in runs.values())
    light, heavy = (runs[r].summary["saturation"]["headroom"] for r in (10, 80))
    assert light > 0.85 and heavy < 0.35
    assert light - heavy > 0.4
    assert runs[10].metrics["headroom"] == light
    assert "headroom" in runs[10].summary_text() and "utilization" not in \
        runs[10].summary_text()


@pytest.mark.parametrize("name", ["quickstart", "routing-least-loaded", "bursty-traffic",
                                  "autoscale-spike"])
def test_runs_that_keep_up_are_not_called_saturated(name):
    result = run(name)
    assert result.summary["saturation"]["verdict"] == "sustainable"
    assert not any(w.startswith("saturated") for w in result.warnings)
    assert not result.summary_text().startswith("**SATURATED**")


def test_too_few_arrivals_give_no_verdict():
    verdict = run(scenario(workload={"num_requests": 10})).summary["saturation"]
    assert verdict == {"verdict": "undetermined", "reason": "only 10 requests arrived in the "
                       "measurement window (a verdict needs 30)"}


def test_saturation_in_the_outputs(saturated, tmp_path: Path):
    """summary.json holds the block; metrics.json (and so sweep rows) the verdict and
    headroom."""
    import json

    saturated.save(tmp_path / "o")
    written = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert written["saturation"]["verdict"] == "saturated"
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["saturated"] is True and metrics["headroom"] < 0
