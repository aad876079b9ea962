"""What the summary's counts and rates count, one definition each (newcomer 18's findings 6,
7, 9 and 12): the cache hit rate is prompt tokens with or without a measurement window; TTFT
figures count the completed requests, as E2E does; a P/D request cut while transferring is
still running; a multi-model run's requests name their model."""

from __future__ import annotations

import pandas as pd
import pytest

import blis_simpy
from blis_simpy.config.scenario import Scenario
from tests.cluster.pd_helpers import pd_scenario
from tests.conftest import scenario

# one system prompt shared by every request: the prefix cache hits
SHARED = {"workload": {"num_requests": 120, "rate_per_s": 40,
                       "prefix_tokens": 256}}


def hit_rate_of(requests: pd.DataFrame) -> float:
    scheduled = requests[requests.scheduled_s.notna()]
    return scheduled.cached_tokens.sum() / scheduled.input_tokens.sum()


def test_cache_hit_rate_is_the_same_with_a_whole_run_window():
    """A window covering the whole run changes no number, the cache hit rate included: it is
    the requests' cached prompt tokens over their prompt tokens either way."""
    plain = blis_simpy.run(scenario(**SHARED))
    windowed = blis_simpy.run(scenario(**SHARED, evaluation={"window": {"end_s": 100000}}))
    rate = plain.summary["cache_hit_rate"]
    assert rate > 0.1
    assert rate == pytest.approx(hit_rate_of(plain.requests), rel=1e-12)
    assert windowed.summary["cache_hit_rate"] == rate
    assert plain.metrics["cache_hit_rate"] == windowed.metrics["cache_hit_rate"] == rate


def test_summary_ttft_counts_the_completed_requests_as_e2e_does():
    """Clients that give up after their first token leave a TTFT in requests.csv but in no
    TTFT figure: the summary, metrics.json and vLLM's benchmark agree, and the mean TTFT
    does not exceed the mean E2E."""
    result = blis_simpy.run(scenario(workload={"num_requests": 200, "rate_per_s": 80,
                                               "timeout_s": 1.0}))
    req = result.requests
    abandoned = req[(req.final_state == "timed_out") & req.ttft_ms.notna()]
    assert len(abandoned) > 0  # the case: a first token, then the client left
    done = req[req.final_state == "completed"]
    s = result.summary
    assert s["ttft_mean_ms"] == pytest.approx(done.ttft_ms.mean(), rel=1e-9)
    assert s["ttft_mean_ms"] == pytest.approx(s["serving_benchmark"]["mean_ttft_ms"], rel=1e-9)
    assert result.metrics["ttft_mean_ms"] == pytest.approx(s["ttft_mean_ms"], rel=1e-9)
    assert s["ttft_mean_ms"] <= s["e2e_mean_ms"]


def test_p_d_requests_cut_while_transferring_are_counted():
    """A horizon that cuts P/D requests between prefill and decode (`transferring`): they are
    in service (`still_running`), so the summary's counts and the requests still arriving add
    up to the arrivals."""
    data = pd_scenario(requests=60, rate=40, prompt=1024, pd={"link": {"bandwidth_gb_s": 2}})
    data["horizon_s"] = 0.8
    result = blis_simpy.run(Scenario.from_dict(data))
    states = result.requests.final_state.value_counts()
    assert states.get("transferring", 0) > 0
    s = result.summary
    assert s["still_running"] == states.get("running", 0) + states["transferring"]
    assert s["still_queued"] == states.get("queued", 0)
    assert s["arrived_requests"] == (s["completed_requests"] + s["still_queued"]
                                     + s["still_running"] + s["rejected_requests"]
                                     + s["timed_out_requests"] + states.get("arriving", 0))


def test_requests_table_names_the_serving_model_with_several_models():
    result = blis_simpy.run("multi-model", overrides={"horizon_s": 10})
    req = result.requests
    assert (req.model != "").all()
    by_tenant = req.groupby("tenant").model.unique()
    assert list(by_tenant["chat"]) == ["meta-llama/llama-3.1-8b-instruct"]
    assert list(by_tenant["analyst"]) == ["meta-llama/llama-3.3-70b-instruct"]
    served = req[req.instance != ""]
    assert (served.groupby("instance").model.nunique() == 1).all()  # an instance, one model
