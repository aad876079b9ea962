"""Issue 35 item 7 with issue 36's streaming records: a speculative run streamed into its folder
reports what the in-memory run reports, the `speculation` section included (its counts, per
tenant too, and the per-step token gaps of requests that emit several tokens a step), and
writes the same files byte for byte."""

from __future__ import annotations

import pytest

from blis_simpy.config.library import scenario_file
from blis_simpy.config.scenario import Scenario
from tests.conftest import merge
from tests.engine.test_speculative import TENANT, spec_data
from tests.sim.test_stream import both, differing, small_chunks  # noqa: F401 (a fixture)


@pytest.mark.parametrize(("name", "overrides"), [
    ("speculative-decoding", {"workload.duration_s": 10}),
    ("speculative-draft-model", {"workload.duration_s": 10}),
])
@pytest.mark.usefixtures("small_chunks")
def test_a_streamed_speculative_run_reports_the_in_memory_speculation(tmp_path, name, overrides):
    memory, streamed = both(tmp_path, scenario_file(name), overrides=overrides)
    assert streamed.streamed is not None and memory.streamed is None
    assert memory.summary["speculation"]["verify_steps"] > 1000
    assert streamed.summary["speculation"] == memory.summary["speculation"]
    assert streamed.summary == memory.summary
    assert differing(tmp_path / "memory", tmp_path / "stream") == []


def test_a_ten_thousand_request_speculative_run_streams_the_same_summary(tmp_path):
    """The default hand-over chunks, 4 instances, two tenants at their own rates: 10,000
    requests streamed give the in-memory run's summary (counts, means and order statistics
    exactly) and files."""
    data = merge(spec_data(4, 0.6), {
        "cluster": {"instances": 4},
        "engine": {"kv_blocks": 20000, "speculative": {"tenant_acceptance": {"code": 0.85}}},
        "workload": {"rate_per_s": 100, "duration_s": 100,
                     "tenants": [{"id": "code", **TENANT}, {"id": "chat", **TENANT}]}})
    memory, streamed = both(tmp_path, Scenario.from_dict(data))
    assert streamed.streamed is not None
    assert memory.summary["completed_requests"] > 9_000
    assert set(memory.summary["speculation"]["by_tenant"]) == {"code", "chat"}
    assert streamed.summary == memory.summary
    assert differing(tmp_path / "memory", tmp_path / "stream") == []
