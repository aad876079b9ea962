"""vLLM's serving-benchmark metrics side by side (summary.json `serving_benchmark`,
metrics/serving.py), named and defined as `benchmark_serving.py` / `vllm bench serve` report
them with `--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99`:

* keys `mean_<m>_ms`, `median_<m>_ms`, `std_<m>_ms`, `p50/p90/p99_<m>_ms` for m in ttft, tpot,
  itl, e2el, plus `completed`, `duration`, `request_throughput`, `output_throughput`,
  `total_token_throughput`;
* TTFT = first token - arrival and E2EL = last token - arrival, per completed request; TPOT =
  (E2EL - TTFT) / (output tokens - 1) per completed request with more than one token; ITL =
  every gap between consecutive tokens (so its sum over a request is E2EL - TTFT); std is the
  population standard deviation (numpy's default), percentiles numpy's linear ones;
* `itl_breakdown`: the share of gaps that ended in a step which also prefilled, and the p99
  gap in steps that only decoded: why ITL's tail exceeds TPOT's.
"""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.api import run
from tests.conftest import scenario
from tests.metrics.test_saturation import overload

NAMES = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
         for s in ("mean", "median", "std", "p50", "p90", "p99")]


@pytest.fixture(scope="module")
def busy():
    return run(scenario(workload={"num_requests": 300, "rate_per_s": 40}))


def test_the_block_has_vllms_names(busy):
    block = busy.summary["serving_benchmark"]
    assert set(NAMES) <= set(block)
    assert {"completed", "duration", "request_throughput", "output_throughput",
            "total_token_throughput", "itl_breakdown"} <= set(block)


def test_ttft_tpot_and_e2el_are_vllms_per_request_definitions(busy):
    block = busy.summary["serving_benchmark"]
    req = busy.requests
    done = req[req.final_state == "completed"]
    ttft = (done.first_token_s - done.arrival_s) * 1000
    e2el = (done.completion_s - done.arrival_s) * 1000
    many = done.output_tokens > 1
    tpot = (e2el - ttft)[many] / (done.output_tokens[many] - 1)
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)):
        assert block[f"mean_{name}_ms"] == pytest.approx(values.mean(), rel=1e-9)
        assert block[f"std_{name}_ms"] == pytest.approx(np.std(values), rel=1e-6)
        assert block[f"median_{name}_ms"] == pytest.approx(np.median(values), rel=1e-9)
        for p in (50, 90, 99):
            assert block[f"p{p}_{name}_ms"] == pytest.approx(np.percentile(values, p),
                                                            rel=1e-9)
    assert block["completed"] == len(done)
    assert block["request_throughput"] == pytest.approx(len(done) / block["duration"])
    assert block["output_throughput"] == pytest.approx(done.generated_tokens.sum()
                                                       / block["duration"])


def test_itl_is_every_gap_between_consecutive_tokens(busy):
    """Its gaps add up to each request's span from first to last token, one gap per token
    after the first; its median is a decode step's time."""
    block = busy.summary["serving_benchmark"]
    req = busy.requests
    done = req[req.final_state == "completed"]
    gaps = int((done.output_tokens - 1).sum())
    span_ms = ((done.completion_s - done.first_token_s) * 1000).sum()
    assert block["mean_itl_ms"] * gaps == pytest.approx(span_ms, rel=1e-6)
    steps = busy.steps
    assert steps.duration_ms.min() <= block["median_itl_ms"] <= steps.duration_ms.max()


def test_itl_tail_beyond_tpot_is_explained_by_steps_that_also_prefill():
    """Issue 31's fourth finding: per-token ITL p99 is dominated by decode tokens sharing a
    step with a prefill chunk, several times TPOT's p99; the breakdown says how many gaps
    that is and what the tail is without them, and the summary text says it."""
    result = run(overload(4.0))
    block = result.summary["serving_benchmark"]
    split = block["itl_breakdown"]
    assert block["p99_itl_ms"] > 1.5 * block["p99_tpot_ms"]
    assert 0.05 < split["gaps_in_prefill_steps_share"] < 0.5
    assert split["p99_itl_decode_only_ms"] < block["p99_tpot_ms"]
    text = result.summary_text()
    assert "- Latency p50 / p90 / p99: TTFT" in text and "; TPOT " in text and "; ITL " in text
    assert "of token gaps ended in a step that also prefilled" in text
