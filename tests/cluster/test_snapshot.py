"""What an instance snapshot carries beyond the contracts' fields (seed G.2): the `extended`
mapping and a recent, not lifetime, cache hit rate; and that admission policies see the
snapshots (seed G.2 `RouterState.Instances`)."""

from __future__ import annotations

from typing import ClassVar

import pytest

import blis_simpy
from blis_simpy.api import build
from blis_simpy.cluster.snapshot import (
    HIT_RATE_STEP_US,
    HIT_RATE_WINDOW_US,
    HitWindow,
    SnapshotProvider,
)
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import ObservabilityConfig, Refresh
from blis_simpy.core.request import State
from blis_simpy.core.snapshot import NO_EXTENDED
from blis_simpy.policies.admission import ADMIT, AdmissionPolicy
from tests.conftest import scenario, trace_run_scenario, write_trace


def test_snapshot_extended_holds_values_without_a_named_field(tmp_path):
    """Seed G.2 `InstanceSnapshot.Extended`: an instance with KV tiers shows its storage tier
    use and its transfer backlogs there (read-only); one without tiers an empty mapping (the
    same object for every snapshot: nothing is built)."""
    plain = build(resolve(scenario()))
    inst = next(iter(plain.fleet))
    snap = plain.gateway.snapshots.snapshot(inst, 0)
    assert snap.extended is NO_EXTENDED and dict(snap.extended) == {}
    trace = write_trace(tmp_path / "t.csv", [(0.05 * i, list(range(i * 1000, i * 1000 + 300)), 5)
                                             for i in range(10)])
    tiered = build(resolve(trace_run_scenario(trace, engine={
        "kv_blocks": 100, "kv_tiers": {"cpu_blocks": 20, "storage_blocks": 400}})))
    tiered.run()
    inst = next(iter(tiered.fleet))
    snap = tiered.gateway.snapshots.snapshot(inst, tiered.env.now)
    assert set(snap.extended) == {"kv_storage_utilization", "offload_backlog_ms",
                                  "reload_backlog_ms"}
    assert snap.extended["kv_storage_utilization"] == inst.kv.storage.used / 400 > 0
    assert snap.extended["offload_backlog_ms"] >= 0 and snap.extended["reload_backlog_ms"] >= 0
    with pytest.raises(TypeError):
        snap.extended["x"] = 1.0  # type: ignore[index]


def test_cache_hit_rate_is_recent_not_lifetime():
    """Seed G.2 `CacheHitRate  // recent cache hit rate`: hits over lookups of the last second
    (HIT_RATE_WINDOW_US, from readings kept every HIT_RATE_STEP_US), not since the start."""
    window = HitWindow()
    assert window.rate(0, 0, 0) == 0.0
    assert window.rate(90, 100, 500_000) == 0.9  # younger than a window: from the start
    assert window.rate(90, 100, HIT_RATE_WINDOW_US) == 0.9
    # 100 misses in the next second: lifetime 90/200, recent 0/100
    assert window.rate(90, 200, HIT_RATE_WINDOW_US + 500_000) == 0.0
    assert window.rate(100, 210, 2 * HIT_RATE_WINDOW_US) == pytest.approx(10 / 110)
    # readings are kept at most every HIT_RATE_STEP_US
    before = len(window.readings)
    window.rate(100, 210, 2 * HIT_RATE_WINDOW_US + HIT_RATE_STEP_US // 2)
    assert len(window.readings) == before
    # a crash resets the instance's totals: the window starts again
    assert window.rate(1, 2, 3 * HIT_RATE_WINDOW_US) == 0.5


def test_cache_hit_rate_in_snapshots_is_windowed():
    """The provider's `cache_hit_rate` is the window's, read by the field's refresh rule."""
    sim = build(resolve(scenario()))
    inst = next(iter(sim.fleet))
    provider = SnapshotProvider(ObservabilityConfig(cache_hit_rate=Refresh("immediate")),
                                {}, {})
    inst.kv.hits, inst.kv.misses = 8, 2
    assert provider.snapshot(inst, 0).cache_hit_rate == 0.8
    inst.kv.misses = 12
    assert provider.snapshot(inst, 1_500_000).cache_hit_rate == 0.0  # 10 misses since
    assert inst.kv.hit_rate == 8 / 20  # the lifetime figure is still the instance's


class Watching(AdmissionPolicy):
    """Admits while no routable instance has a queue, recording what it saw."""

    seen: ClassVar[list[tuple[int, int]]] = []

    def decide(self, req, state, clock):
        snaps = state.instance_snapshots()
        Watching.seen.append((len(snaps), max(s.queue_depth for s in snaps)))
        return ADMIT


def test_admission_policies_see_instance_snapshots(monkeypatch):
    """Seed G.2 (`RouterState.Instances`, `AllSnapshots()`): an admission policy reads the
    routable instances' snapshots through the router state, taken when it asks."""
    import sys
    import types

    module = types.ModuleType("watching_admission")
    module.Watching = Watching  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "watching_admission", module)
    Watching.seen = []
    result = blis_simpy.run(scenario(cluster={"instances": 3}, workload={"rate_per_s": 200},
                                     policies={"admission": {"type":
                                                             "watching_admission:Watching"}}))
    assert len(Watching.seen) == len(result.requests) > 0
    assert {n for n, _ in Watching.seen} == {3}
    assert max(q for _, q in Watching.seen) > 0  # it saw the queues build
    assert (result.requests.final_state == State.COMPLETED.value).all()
