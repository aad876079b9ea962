"""Seed 001 §9's ScaleEfficiency and TailLatencyBlowup, D.7's autoscaler signals (SLO
attainment, p99, load history), 001 §10's scale-record actuation fields and per-event records
for preemptions and KV-tier transfers. Each figure is checked against the run's own records."""

from __future__ import annotations

import itertools
import sys
import types
from typing import ClassVar

import numpy as np
import pytest

import blis_simpy
from blis_simpy.config.scenario import Scenario
from blis_simpy.policies.autoscale import SIGNAL_HISTORY, AutoscalePolicy, ScaleDecision
from tests.cluster.autoscale_helpers import run, scenario
from tests.conftest import scenario as base_scenario
from tests.conftest import trace_run_scenario, write_trace

ALWAYS_UP = {"type": "oscillator"}


def test_scale_efficiency_and_tail_latency_blowup():
    """Seed 001 §9 `ScaleEfficiency` (SLO attainment per replica) and `TailLatencyBlowup`
    (E2E p99 / p50), in metrics.json: on a fixed cluster per instance, with a deployment per
    average replica; null without SLO targets."""
    fixed = blis_simpy.run(base_scenario(cluster={"instances": 3},
                                         evaluation={"slo_targets": {"default":
                                                                     {"ttft_ms": 200}}}))
    m = fixed.metrics
    assert m["scale_efficiency"] == pytest.approx(m["slo_attainment"] / 3)
    e2e = fixed.requests.e2e_ms.dropna().to_numpy()
    assert m["tail_latency_blowup"] == pytest.approx(np.percentile(e2e, 99)
                                                     / np.percentile(e2e, 50))
    assert m["tail_latency_blowup"] >= 1
    untargeted = blis_simpy.run(base_scenario()).metrics
    assert untargeted["scale_efficiency"] is None
    scaled = run(scenario(ALWAYS_UP, pool={"min": 1, "max": 3, "initial": 1}, interval=2.0))
    avg = scaled.summary["deployment"]["avg_replicas"]
    assert 1 < avg < 3
    assert scaled.metrics["scale_efficiency"] == pytest.approx(
        scaled.metrics["slo_attainment"] / avg)


class Recording(AutoscalePolicy):
    """Never scales; keeps every context it is shown."""

    seen: ClassVar[list] = []

    def evaluate(self, ctx):
        Recording.seen.append(ctx)
        return ScaleDecision("none", 0, "watching")


def test_autoscaler_signals_slo_attainment_p99_and_history(monkeypatch):
    """Seed D.7 (AutoScale observables: `SLOAttainment`, recent load samples) and the p99 a
    tail-aware policy needs: each evaluation's signals carry the SLO attainment of what
    completed since the last look (tenant `app`'s TTFT target of 1 s), the recent TTFTs'
    p99, and the previous evaluations' signals (the last SIGNAL_HISTORY)."""
    module = types.ModuleType("recording_autoscale")
    module.Recording = Recording  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "recording_autoscale", module)
    Recording.seen = []
    result = run(scenario({"type": "recording_autoscale:Recording"}, rate=60, duration=15,
                          interval=1.0))
    seen = Recording.seen
    assert len(seen) > SIGNAL_HISTORY + 2
    for before, ctx in itertools.pairwise(seen):
        assert ctx.history[-1] == before.signals
        assert ctx.history == (*before.history, before.signals)[-SIGNAL_HISTORY:]
    attained = [c.signals.slo_attainment for c in seen if c.signals.slo_attainment is not None]
    assert attained and all(0 <= a <= 1 for a in attained)
    assert min(attained) < 1  # one overloaded replica: TTFTs pass 1 s
    assert max(c.signals.ttft_p99_ms for c in seen) >= max(c.signals.recent_ttft_ms
                                                           for c in seen) > 0
    done = result.requests[result.requests.final_state == "completed"]
    assert 0 < int((done.ttft_ms <= 1000).sum()) < len(done)  # the run's own attainment too


def test_scale_records_carry_actuation_fields():
    """Seed 001 §10 `ScaleRecord.ProvisioningDelay` / `WarmupEndTime`, from the lifecycle
    records: a scale-up's provisioning delay (until its replica loads its model) and when it
    reached steady state (active after its warm-up); NaN for a scale-down."""
    data = scenario(ALWAYS_UP, pool={"min": 1, "max": 2, "initial": 1}, interval=5.0,
                    actuation={"provisioning_s": {"type": "constant", "value": 2.0},
                               "load_s": {"type": "constant", "value": 0.5},
                               "warmup": {"duration_s": 1.0}})
    events = run(data).scale_events
    ups, downs = events[events.action == "up"], events[events.action == "down"]
    assert len(ups) and len(downs)
    first = ups.iloc[0]
    assert first.provisioning_delay_s == pytest.approx(2.0)
    assert first.warmup_end_s == pytest.approx(first.time_s + 3.5)
    assert downs.provisioning_delay_s.isna().all() and downs.warmup_end_s.isna().all()


def test_preemption_records_one_row_per_preemption(tmp_path):
    """Seed 001 §10 `PreemptionEvents`: preemptions.csv has one row per preemption (time,
    instance, request, tokens computed and discarded), as many as the requests table counts."""
    result = blis_simpy.run(base_scenario(engine={"kv_blocks": 120},
                                          workload={"rate_per_s": 200}))
    table = result.preemptions
    assert len(table) == int(result.requests.preemptions.sum()) > 0
    assert list(table.columns) == ["time_s", "instance", "request", "discarded_tokens"]
    assert (table.discarded_tokens > 0).all()
    assert table.time_s.is_monotonic_increasing
    per_request = table.groupby("request").size()
    counted = result.requests.set_index("id").preemptions
    assert (per_request == counted[per_request.index]).all()
    result.save(tmp_path / "out")
    assert (tmp_path / "out" / "preemptions.csv").read_text().count("\n") == len(table) + 1


def test_kv_transfer_records_one_row_per_transfer(tmp_path):
    """Seed 001 §10 `KVTransferEvents`: with KV tiers, kv_transfers.csv has one row per
    transfer queued on a tier link (from, to, blocks, latency), adding up to the tiers'
    offload and reload counts; a run without tiers has no such table."""
    trace = write_trace(tmp_path / "t.csv", [(0.05 * i, list(range((i % 3) * 1000,
                                                                   (i % 3) * 1000 + 600)), 5)
                                             for i in range(30)])
    scenario_ = trace_run_scenario(trace, engine={"kv_blocks": 60, "kv_tiers": {
        "cpu_blocks": 40, "storage_blocks": 200}})
    result = blis_simpy.run(scenario_)
    table = result.kv_transfers
    assert table is not None and len(table) > 0
    tiers = result.summary["kv_tiers"]
    reloads = table[table.to_tier == "gpu"]
    offloads = table[table.to_tier != "gpu"]
    assert set(zip(table.from_tier, table.to_tier, strict=True)) <= {
        ("gpu", "cpu"), ("cpu", "storage"), ("cpu", "gpu"), ("storage", "gpu")}
    assert len(reloads) and len(offloads)
    assert (table.latency_ms >= 0).all() and (table.blocks > 0).all()
    assert table.time_s.is_monotonic_increasing
    assert int(offloads.blocks.sum()) == tiers["offloaded_blocks"]
    assert int(reloads.blocks.sum()) == tiers["reloaded_blocks"]
    assert blis_simpy.run(Scenario.from_dict(base_scenario().to_dict())).kv_transfers is None
