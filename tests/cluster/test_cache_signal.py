"""The instances' real prefix caches as the router hears of them (issue 35 item 3): immediate,
periodic (the reference's --cache-signal-delay) and on demand, on real KV caches and in whole
runs, where the precise-prefix-cache scorer follows the real cache and the shadow-model
scorer its prediction."""

from __future__ import annotations

import numpy as np
import pytest

import blis_simpy
from blis_simpy.cluster.cache_signal import CacheSignal
from blis_simpy.config.scenario import Refresh
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import KVCache
from tests.conftest import scenario, trace_run_scenario, write_trace

BLOCK = 16
PREFIX = list(range(1000, 1064))  # 4 blocks


class Holder:
    def __init__(self) -> None:
        self.kv = KVCache(64, BLOCK)


class Fleet:
    def __init__(self, n: int) -> None:
        self.instances = {f"instance_{i}": Holder() for i in range(n)}

    def get(self, instance_id):
        return self.instances.get(instance_id)


def cache(kv: KVCache, tokens: list[int], index: int = 0) -> list[int]:
    """Serve a prompt through the cache and free it (its blocks stay cached); its hashes."""
    req = Request(index, 0, np.array(tokens), np.arange(2))
    req.hash_blocks(BLOCK)
    assert kv.admit(req, kv.lookup(req, len(tokens)), 0, len(tokens))
    kv.complete(req)
    return req.hashes[: len(tokens) // BLOCK]


def test_an_immediate_signal_reads_the_cache_as_it_is():
    fleet = Fleet(2)
    signal = CacheSignal(fleet, Refresh("immediate"))
    hashes = cache(fleet.get("instance_1").kv, PREFIX)
    assert signal.cached_blocks("instance_1", hashes, 0) == 4
    assert signal.cached_blocks("instance_0", hashes, 0) == 0
    assert signal.cached_blocks("instance_9", hashes, 0) == 0  # gone from the fleet
    assert signal.copies == {}


def test_a_periodic_signal_sees_a_change_only_after_its_interval():
    fleet = Fleet(1)
    kv = fleet.get("instance_0").kv
    signal = CacheSignal(fleet, Refresh("periodic", 0.05))
    hashes = cache(kv, PREFIX)
    assert signal.cached_blocks("instance_0", hashes, 1_000) == 4  # first read: a copy
    other = cache(kv, list(range(5000, 5032)), 1)  # cached after the copy
    assert signal.cached_blocks("instance_0", other, 50_999) == 0
    assert signal.cached_blocks("instance_0", other, 51_000) == 2


def test_an_on_demand_signal_changes_only_when_a_policy_refreshes():
    fleet = Fleet(1)
    kv = fleet.get("instance_0").kv
    signal = CacheSignal(fleet, Refresh("on-demand"))
    assert signal.cached_blocks("instance_0", [1, 2], 0) == 0
    hashes = cache(kv, PREFIX)
    assert signal.cached_blocks("instance_0", hashes, 10**9) == 0
    signal.refresh()
    assert signal.cached_blocks("instance_0", hashes, 10**9) == 4


def repeat_trace(tmp_path):
    """The same 4-block prefix twice, a second apart (the first is long finished)."""
    return write_trace(tmp_path / "t.csv", [(0.0, PREFIX + list(range(5000, 5016)), 1),
                                            (1.0, PREFIX + list(range(6000, 6016)), 1)])


def second_scores(tmp_path, scorers, **observe):
    s = trace_run_scenario(repeat_trace(tmp_path), engine={"kv_blocks": 64},
                           cluster={"instances": 2, "trace_level": "decisions",
                                    "observability": observe},
                           policies={"routing": {"type": "weighted",
                                                 "params": {"scorers": scorers}}})
    decisions = blis_simpy.run(s).decisions
    routed = decisions[decisions.stage == "routing"].set_index("request")
    return routed.loc["request_1", "scores"]


def test_bdd_precise_prefix_cache_scores_the_instance_really_holding_the_prefix(tmp_path):
    # Given the prefix was served on instance_0 and the router hears of caches at once
    # When the same prefix arrives again
    got = second_scores(tmp_path, {"precise-prefix-cache": 1},
                        cached_blocks={"mode": "immediate"})
    # Then instance_0 scores 1 and instance_1, which has none of it, 0
    assert got == "instance_0=1;instance_1=0"


def test_bdd_a_stale_cache_signal_has_not_heard_of_the_prefix_yet(tmp_path):
    # Given the router's copy of the caches is refreshed every 10 s (taken before the first
    # request was served)
    got = second_scores(tmp_path, {"precise-prefix-cache": 1},
                        cached_blocks={"mode": "periodic", "interval_s": 10})
    # Then nothing tells the instances apart a second later: both score 1
    assert got == "instance_0=1;instance_1=1"


def test_no_hit_lru_sends_a_cold_request_to_the_instance_not_used_and_a_warm_one_neutral(
        tmp_path):
    got = second_scores(tmp_path, {"no-hit-lru": 1}, cached_blocks={"mode": "immediate"})
    assert got == "instance_0=0.5;instance_1=0.5"  # warm: the prefix is cached on 0
    trace = write_trace(tmp_path / "cold.csv", [(0.0, list(range(1, 40)), 1),
                                                (1.0, list(range(100, 140)), 1)])
    s = trace_run_scenario(trace, cluster={"instances": 2},
                           policies={"routing": {"type": "weighted",
                                                 "params": {"scorers": {"no-hit-lru": 1}}}})
    assert list(blis_simpy.run(s).requests.instance) == ["instance_0", "instance_1"]


@pytest.mark.parametrize(("value", "path"), [
    ({"mode": "periodic"}, "cluster.observability.cached_blocks.interval_s"),
    ({"mode": "sometimes"}, "cluster.observability.cached_blocks.mode"),
    ({"interval_s": -1}, "cluster.observability.cached_blocks.interval_s"),
    ({"delay": 1}, "cluster.observability.cached_blocks.delay"),
])
def test_bad_cache_signal_settings_name_their_key(value, path):
    with pytest.raises(ScenarioError) as err:
        scenario(cluster={"observability": {"cached_blocks": value}})
    assert err.value.path == path


def test_the_default_cache_signal_is_left_out_of_the_written_scenario():
    written = scenario().to_dict()["cluster"]["observability"]
    assert "cached_blocks" not in written
    changed = scenario(cluster={"observability": {"cached_blocks": {"mode": "immediate"}}})
    assert changed.to_dict()["cluster"]["observability"]["cached_blocks"]["mode"] == "immediate"
