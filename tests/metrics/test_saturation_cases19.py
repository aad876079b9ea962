"""Newcomer 19's cases where the load verdict was wrong (metrics/saturation.py), each
reproduced small: a sustainable rate measured on a short saturated run before its batch had
turned over once (up to 2x low, or high), and "a batch, not a rate" said of a steady stream
of which nothing was served.

Definitions checked:
* the measured rate counts completions only once the batch that filled when the wait queue
  formed has turned over (as many completions since as were in service then); a run too short
  for that, or for `MIN_MEASURED` completions after it, says so and reports the step-cost
  model's figure (the completions' figure kept as `measured_rate_per_s`);
* a run where no measured request completed is `undetermined`, "nothing was served", not a
  batch.
"""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.api import run
from blis_simpy.metrics.saturation import Timelines
from blis_simpy.metrics.warnings import run_warnings
from tests.metrics.test_saturation_cases import WHOLE, batched, judged, summary_of


def test_a_run_ending_before_its_batch_turned_over_uses_the_model_and_says_why():
    """100 slots of 10 s (10 req/s) offered 14 req/s for 10 s: the queue forms at 7.8 s and
    the queue drains by 13 s, before the first hundred complete again; completions then read
    14 req/s, 40 % above what the servers can do."""
    verdict = judged(batched([i / 14 for i in range(140)], 100, 10.0), model=10.5)
    assert verdict["verdict"] == "saturated"
    assert verdict["max_sustainable_rate_per_s"] == 10.5
    assert verdict["max_sustainable_method"].startswith(
        "step-cost model (the run is too short to measure the rate: its servers filled at "
        "t=7.8")
    assert verdict["measured_rate_per_s"] == pytest.approx(14, rel=0.05)


def test_a_run_long_enough_to_turn_its_batch_over_is_measured():
    """The same servers offered 14 req/s for 60 s: measured, within a few percent."""
    verdict = judged(batched([i / 14 for i in range(840)], 100, 10.0), model=10.5)
    assert verdict["max_sustainable_method"].startswith("measured")
    assert verdict["max_sustainable_rate_per_s"] == pytest.approx(10, rel=0.03)
    assert "measured_rate_per_s" not in verdict


@pytest.mark.parametrize("changes", [{"workload.num_requests": 400},
                                     {"workload.num_requests": 3000, "horizon_s": 10}],
                         ids=["400-requests", "horizon-10s"])
def test_a_short_saturated_quickstart_is_not_read_at_half_its_capacity(changes):
    """Newcomer 19 #2b: quickstart at 40 req/s (one replica carries about 27.5) read 16.4
    req/s with 400 requests and 14.0 with a 10 s horizon: the batch was still growing in the
    span's second half, so few of its requests completed; the advice said about 3 instances
    (the right answer is 2)."""
    result = run("quickstart", overrides={"workload.rate_per_s": 40, **changes})
    verdict = result.summary["saturation"]
    assert verdict["verdict"] == "saturated"
    assert "too short to measure" in verdict["max_sustainable_method"]
    assert 25 < verdict["max_sustainable_rate_per_s"] < 31
    assert 1.25 < verdict["load_factor"] < 1.6


def test_a_stream_of_which_nothing_was_served_is_not_a_batch(tiny):
    """Newcomer 19 #7: reject-all on a steady 55 req/s said "a batch, not a rate: all 1113
    requests arrived within 20 s, less than a tenth of the time the first of them took to
    complete", though none completed."""
    arrived = np.array([round(i * 1e6 / 55) for i in range(1100)], dtype=np.int64)
    none = np.full_like(arrived, -1)
    verdict = judged(Timelines(arrived, arrived.copy(), none, none, WHOLE), model=40.0)
    assert verdict == {"verdict": "undetermined", "reason": "nothing was served: none of the "
                       "1100 requests that arrived completed (rejected, timed out or still in "
                       "service at the end)"}
    warnings = run_warnings(summary_of(verdict), set(), set(), tiny, 1100)
    assert not any("batch" in w for w in warnings)


@pytest.fixture(scope="module")
def tiny():
    from tests.conftest import scenario

    return scenario()
