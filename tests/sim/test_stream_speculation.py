"""Issue 35 item 7 with issue 36's streaming records: a speculative run streamed into its folder
reports what the in-memory run reports, the `speculation` section included (its counts, per
tenant too, and the per-step token gaps of requests that emit several tokens a step), and
writes the same files byte for byte."""

from __future__ import annotations

import pytest

from blis_simpy.config.library import scenario_file
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
