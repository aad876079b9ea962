"""Newcomer 18's cases where the saturation verdict was wrong (metrics/saturation.py), each
reproduced small: a sustainable rate measured from requests entering service (3x too high, 0,
or 10x too low when a request's service time is long against the span), an overload the queue
had not shown yet, a closed loop's standing queue, clients timing out, `max_model_len`
rejections called a capacity problem, an all-at-once batch judged as a rate, and "caught up
later" said of an overload in the span's last window.

Definitions checked:
* a run saturated by a growing queue measures its sustainable rate from completions while
  requests waited (the span's middle through the drain), not from entries into service;
* a run whose queue did not grow is `saturated` (with a `reason`, the model's rate) when the
  offered rate is above 1.1x the step-cost model's capacity;
* the model counts the output tokens the requests asked for, not those served before a
  timeout;
* every measured arrival within a tenth of the first completion's time: `undetermined`, a
  `batch`, a warning;
* "caught up later" only when the last window is STABLE.
"""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.api import run
from blis_simpy.config.scenario import MeasurementWindow
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.saturation import OVERLOADED, STABLE, Timelines, saturation
from blis_simpy.metrics.warnings import run_warnings
from blis_simpy.metrics.window import Window
from blis_simpy.sim.output import OutputFolder
from blis_simpy.sim.run import prepare, simulate

WHOLE = Window.of(MeasurementWindow())


def batched(arrived_s: list[float], slots: int, service_s: float, spread: float = 0.0
            ) -> Timelines:
    """A server with `slots` batch slots, each request holding one for `service_s` (FIFO),
    or for a time spread evenly over `service_s` x (1 +- `spread`)."""
    free = [0] * slots
    arrived = np.array([round(t * US_PER_S) for t in arrived_s], dtype=np.int64)
    entered, completed = np.empty_like(arrived), np.empty_like(arrived)
    for i, t in enumerate(arrived.tolist()):
        slot = min(range(slots), key=free.__getitem__)
        entered[i] = max(t, free[slot])
        length = service_s * (1 + spread * (2 * ((i * 0.618034) % 1) - 1))
        free[slot] = completed[i] = entered[i] + round(length * US_PER_S)
    return Timelines(arrived, entered.copy(), completed, entered, WHOLE)


def judged(timeline: Timelines, model: float | None = None) -> dict:
    return saturation(timeline, WHOLE, lambda: (model, "model"))


def test_long_service_times_measure_the_rate_from_completions_not_entries():
    """Newcomer 18 #2: 100 slots held 20-40 s each (3.33 req/s) offered 20 req/s for 20 s.
    The batch fills in the first 5 s and nothing enters in the span's second half: the old
    estimate was 0 (and the fitness's `sustained` 0)."""
    verdict = judged(batched([i / 20 for i in range(400)], 100, 30.0, spread=1 / 3))
    assert verdict["verdict"] == "saturated"
    assert verdict["max_sustainable_method"].startswith("measured: the rate requests completed")
    assert verdict["max_sustainable_rate_per_s"] == pytest.approx(100 / 30, rel=0.1)


def test_a_short_service_time_is_measured_as_before():
    """The servers' rate, whatever the service time: 10 slots of 0.5 s (20 req/s) at 40 req/s."""
    verdict = judged(batched([i / 40 for i in range(2400)], 10, 0.5))
    assert verdict["verdict"] == "saturated"
    assert verdict["max_sustainable_rate_per_s"] == pytest.approx(20, rel=0.03)


def test_an_overload_the_queue_has_not_shown_yet_is_saturated_by_the_model():
    """Newcomer 18 #2 (8 replicas, 1,000 requests): the model says 21 % over capacity, but the
    run ended before the queue grew. 20 req/s into 1,000 slots holds everything."""
    timeline = batched([i / 20 for i in range(600)], 1000, 30.0)
    assert judged(timeline, model=30.0)["verdict"] == "sustainable"
    verdict = judged(timeline, model=16.5)
    assert verdict["verdict"] == "saturated" and verdict["level"] == OVERLOADED
    assert verdict["max_sustainable_rate_per_s"] == 16.5
    assert verdict["load_factor"] == pytest.approx(20 / 16.5, rel=0.01)
    assert "did not grow" in verdict["reason"] and "too short" in verdict["reason"]
    assert judged(timeline, model=19.0)["verdict"] == "sustainable"  # within the model's error


def test_every_request_at_once_is_a_batch_not_a_rate():
    """Newcomer 18 #9b: 500 requests at t=0 were "only 500 requests arrived"."""
    verdict = judged(batched([0.0] * 500, 256, 2.0))
    assert verdict["verdict"] == "undetermined" and "level" not in verdict
    assert verdict["reason"].startswith("a batch, not a rate: all 500 requests arrived within 0 s")
    assert verdict["batch"] == {"requests": 500, "span_s": 0.0}


def test_a_batch_spread_over_a_millisecond_is_still_a_batch():
    """Newcomer 18 #9b: 499 at t=0 and one at 1 ms was `sustainable` at load factor 17,704."""
    verdict = judged(batched([0.0] * 499 + [0.001], 256, 2.0), model=28.0)
    assert verdict["verdict"] == "undetermined" and "batch" in verdict
    assert "0.001 s" in verdict["reason"]


def summary_of(verdict: dict) -> dict:
    return {"arrived_requests": 500, "completed_requests": 500, "rejected_requests": 0,
            "rejected_by_reason": {}, "timed_out_requests": 0, "still_queued": 0,
            "still_running": 0, "saturation": verdict}


def test_a_batch_is_warned(tiny):
    verdict = judged(batched([0.0] * 500, 256, 2.0))
    [warning] = run_warnings(summary_of(verdict), set(), set(), tiny, 500)
    assert warning.startswith("a batch, not a rate") and "no load verdict" in warning


def test_an_overload_in_the_last_window_is_not_said_to_have_caught_up(tiny):
    """Newcomer 18 #10: the span's last window OVERLOADED, yet "caught up later"."""
    window = {"span_s": [9.0, 10.0], "level": OVERLOADED, "offered_rate_per_s": 50.0,
              "served_rate_per_s": 30.0, "queue_growth_per_s": 20.0, "waiting_at_end": 40}
    calm = {**window, "span_s": [8.0, 9.0], "level": STABLE, "waiting_at_end": 0}
    verdict = {"verdict": "sustainable", "windows": [calm, window]}
    [warning] = run_warnings(summary_of(verdict), set(), set(), tiny, 500)
    assert "caught up later" not in warning
    assert "was still overloaded at the span's end (40 waiting at t=10 s)" in warning
    drained = {"verdict": "sustainable", "windows": [window, {**calm, "span_s": [10.0, 11.0]}]}
    [warning] = run_warnings(summary_of(drained), set(), set(), tiny, 500)
    assert "caught up later" in warning


@pytest.fixture(scope="module")
def tiny():
    from tests.conftest import scenario

    return scenario()


def test_timeouts_do_not_hide_an_overload():
    """Newcomer 18 #2c: quickstart at 45 req/s with a 3 s timeout was "sustainable, headroom
    6 %, STABLE": the model counted the tokens served before clients left."""
    result = run("quickstart", overrides={"workload.rate_per_s": 45, "workload.num_requests":
                                          1500, "workload.timeout_s": 3})
    verdict = result.summary["saturation"]
    assert result.summary["timed_out_requests"] > 1000
    assert verdict["verdict"] == "saturated" and verdict["level"] == OVERLOADED
    assert verdict["capacity_model_per_s"] < 36  # 27 measured without timeouts
    assert result.evaluation.sustained < 0.8


def test_max_model_len_rejections_warn_and_are_not_capacity():
    """Newcomer 18 #5: half the requests rejected for max_model_len gave no warning and a
    CAPACITY key issue."""
    result = run("quickstart", overrides={"engine.max_model_len": 900})
    rejected = result.summary["rejected_by_reason"]["exceeds_max_model_len"]
    assert rejected > 100
    assert any(w.startswith(f"{rejected} requests need more tokens (prompt + output) than "
                            "engine.max_model_len (900)") for w in result.warnings)
    text = result.summary_text()
    assert "CONFIG: " in text and "exceed engine.max_model_len" in text
    assert "CAPACITY: " not in text


def test_a_cold_start_is_warned_as_warm_up_bias(tmp_path):
    """Newcomer 18 #12: `run` never said a result was warm-up biased. prefix-heavy on 8
    replicas: the first 1.4 s (cold prefix caches) have a TTFT p90 of about 40 ms against 29 ms
    after, at the same offered rate; skipping 2 s of warm-up measures the steady state."""
    result = run("prefix-heavy", overrides={"cluster.instances": 8})
    bias = result.summary["saturation"]["warmup"]
    assert bias["early_ttft_p90_ms"] > 1.25 * bias["later_ttft_p90_ms"][1]
    assert any(w.startswith("warm-up biased: the requests that arrived in the span's first "
                            "tenth (0-1.399 s)") for w in result.warnings)
    steady = run("prefix-heavy", overrides={"cluster.instances": 8,
                                            "evaluation.window.warmup_s": 2})
    assert "warmup" not in steady.summary["saturation"]
    assert not any(w.startswith("warm-up") for w in steady.warnings)
    # a streamed run (records in scratch files) finds the same
    sim = prepare("prefix-heavy", overrides={"cluster.instances": 8})
    streamed = simulate(sim, folder=OutputFolder(tmp_path / "out", "csv"), record_mode="stream")
    assert streamed.summary["saturation"] == result.summary["saturation"]


def test_a_closed_loop_with_far_too_few_replicas_is_saturated():
    """Newcomer 18 #2b: 2,000 closed-loop users on one replica: the queue plateaus at the user
    count, so it never grew, and the run was "sustainable", `sustained` 1, "caught up later"."""
    result = run("closed-loop", overrides={"workload.tenants[0].closed_loop.users": 2000})
    verdict = result.summary["saturation"]
    assert verdict["verdict"] == "saturated" and verdict["level"] == OVERLOADED
    assert verdict["load_factor"] > 2 and "closed loop" in verdict["reason"]
    assert result.evaluation.sustained < 0.5
    assert not any("caught up" in w for w in result.warnings)
    assert run("closed-loop").summary["saturation"]["verdict"] == "sustainable"
