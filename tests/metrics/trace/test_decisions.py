"""The decision trace of whole runs: what each level records, that recording never changes the
run, the routing rows' context and outcomes, and byte-identical reruns."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blis_simpy
from blis_simpy.core.errors import ScenarioError
from tests.conftest import merge, scenario, tenant, tenants_scenario

ROUTERS = ["round-robin", "least-loaded", "weighted", "prefix-affinity", "always-busiest"]


def traced(level: str = "decisions", routing: str = "weighted", **changes):
    """Four instances, requests sharing a 64-token prefix, `changes` merged over that."""
    return scenario(**merge({"cluster": {"instances": 4, "trace_level": level},
                             "policies": {"routing": {"type": routing}},
                             "workload": {"prefix_tokens": 64}}, changes))


@pytest.mark.parametrize("routing", ROUTERS)
def test_tracing_never_changes_the_run(routing):
    runs = {level: blis_simpy.run(traced(level, routing)) for level in
            ("none", "decisions", "full")}
    base = runs["none"]
    assert base.decisions is None and base.events is None and "shadow_kv" not in base.metrics
    for level in ("decisions", "full"):
        other = runs[level]
        assert other.requests.equals(base.requests)
        assert other.steps.equals(base.steps)
        assert other.summary == base.summary
        metrics = {k: v for k, v in other.metrics.items() if k not in ("shadow_kv",
                                                                       "anomalies")}
        assert metrics == {k: v for k, v in base.metrics.items() if k != "anomalies"}
        kept = other.anomalies[other.anomalies.type != "shadow_divergence"]
        assert kept.reset_index(drop=True).equals(base.anomalies)
    assert runs["decisions"].events is None
    assert runs["full"].events is not None and runs["full"].decisions.equals(
        runs["decisions"].decisions)


@pytest.mark.parametrize("routing", ROUTERS)
def test_every_routing_row_has_its_top_k_candidates_with_breakdowns(routing):
    result = blis_simpy.run(traced(routing=routing, cluster={"top_k": 3}))
    routed = result.decisions[result.decisions.stage == "routing"]
    assert len(routed) == 40
    for row in routed.itertuples():
        top = row.top_candidates.split(";")
        assert len(top) == 3 and len(row.scores.split(";")) == 4
        assert top[0].split("=")[0] == row.instance  # the chosen one scored best
        if routing == "weighted":
            assert all("(prefix-affinity=" in c and ",queue-depth=" in c
                       and ",kv-utilization=" in c for c in top)


def test_routing_rows_carry_the_requests_context_and_actual_outcome():
    result = blis_simpy.run(traced(routing="least-loaded"))
    routed = result.decisions[result.decisions.stage == "routing"].set_index("request")
    requests = result.requests.set_index("id")
    assert (routed.input_tokens == requests.input_tokens[routed.index]).all()
    assert (routed.prefix_hash.str.len() == 16).all()  # a 64-token shared prefix: 4 blocks
    assert routed.prefix_hash.nunique() == 1
    assert np.allclose(routed.actual_ttft_ms, requests.ttft_ms[routed.index])
    assert (routed.cached_tokens == requests.cached_tokens[routed.index]).all()
    assert ((routed.cache_hit == "True") == (routed.cached_tokens > 0)).all()
    assert (routed.filtered == "").all()
    # least-loaded reads every snapshot: the row shows what it saw of each instance
    assert (routed.seen.str.count("queue_depth=") == 4).all()
    assert (routed.score_regret == 0).all()  # a template always picks its own best
    assert (routed.ttft_regret_ms >= 0).all()


def test_a_policy_that_reads_no_snapshot_shows_none():
    result = blis_simpy.run(traced(routing="round-robin"))
    routed = result.decisions[result.decisions.stage == "routing"]
    assert (routed.seen == "").all()


def test_admission_and_priority_decisions_are_recorded_with_their_values():
    s = tenants_scenario([tenant("rt", "realtime", 0.5, "constant", 100, 10),
                          tenant("bulk", "batch", 0.5, "periodic", 400, 10)], 10, 2,
                         cluster={"trace_level": "decisions"},
                         policies={"priority": {"type": "tenant-priority",
                                                "params": {"tenants": {"rt": 10}}}})
    result = blis_simpy.run(s)
    d = result.decisions
    admitted = d[d.stage == "admission"]
    priority = d[d.stage == "priority"].set_index("request")
    assert (admitted.outcome == "admit").all()
    assert len(priority) == len(admitted) == len(d[d.stage == "routing"])
    assert set(priority.priority[priority.tenant == "rt"]) == {10.0}
    assert set(priority.priority[priority.tenant == "bulk"]) == {0.0}
    assert (priority.reason == "tenant-priority").all()


def test_rejections_are_recorded_with_their_reason():
    result = blis_simpy.run(traced(policies={"admission": {"type": "reject-all"}}))
    d = result.decisions
    assert set(d.stage) == {"admission"} and set(d.outcome) == {"reject"}
    assert (d.reason != "").all()


def test_decisions_jsonl_has_every_candidate_with_breakdown_and_snapshot(tmp_path: Path):
    s = traced(outputs={"trace_formats": ["jsonl"]})
    result = blis_simpy.run(s)
    result.save(tmp_path / "out", "csv")
    lines = (tmp_path / "out" / "decisions.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == len(result.decisions)
    routed = [r for r in rows if r["stage"] == "routing"]
    for row in routed:
        assert len(row["candidates"]) == 4 and len(row["top_k"]) == 3
        assert row["candidates"][0]["instance"] == row["instance"]
        assert set(row["candidates"][0]["breakdown"]) == {"prefix-affinity", "queue-depth",
                                                          "kv-utilization"}
        assert row["candidates"][0]["seen"]["queue_depth"] >= 0
        assert row["ttft_regret_ms"] >= 0


def test_jsonl_without_a_decision_trace_is_refused_before_the_run():
    with pytest.raises(ScenarioError) as err:
        scenario(outputs={"trace_formats": ["jsonl"]})
    assert err.value.path == "outputs.trace_formats"


def test_traces_are_identical_across_reruns(tmp_path: Path):
    s = traced("full", outputs={"trace_formats": ["jsonl", "perfetto"]})
    files = []
    for i in range(3):
        blis_simpy.run(s).save(tmp_path / f"run{i}", "csv")
        files.append({p.name: p.read_bytes() for p in sorted((tmp_path / f"run{i}").iterdir())})
    assert {"decisions.csv", "decisions.jsonl", "trace.json"} <= set(files[0])
    for other in files[1:]:
        assert other == files[0]
