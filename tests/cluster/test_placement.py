"""Issue 35 item 5, node pools and placement: best fit on ready nodes, new nodes while the
pool may grow, GPUs back at termination, GPU counts under hypothesis, the scenario keys, and
whole runs where scale-up is limited by the pool's free GPUs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.cluster.placement import Placement
from blis_simpy.config.node_pools import NodePool
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.schema import load
from blis_simpy.sim.deploy import node_provisioning


def pool(**fields) -> NodePool:
    return load(NodePool, {"id": "p", "gpu": "H100", **fields}, "deployment.node_pools[0]")


def placement(*pools: NodePool) -> tuple[Environment, Placement, ScaleLog]:
    env, log = Environment(), ScaleLog()
    return env, Placement(env, list(pools), log, node_provisioning(seed=1)), log


def test_best_fit_puts_a_replica_on_the_fullest_ready_node_that_has_room():
    p = pool(gpus_per_node=8, nodes=3)
    _, place, _ = placement(p)
    nodes = place.nodes["p"]
    place.hold(nodes[0], "a", "c", 6)  # node 0: 2 free
    place.hold(nodes[1], "b", "c", 4)  # node 1: 4 free, node 2: 8 free
    assert place.find(p, 2, "c") is nodes[0]
    assert place.find(p, 3, "c") is nodes[1]
    assert place.find(p, 5, "c") is nodes[2]


def test_a_pool_below_max_nodes_adds_a_node_that_is_ready_after_its_provisioning():
    p = pool(gpus_per_node=2, nodes=1, max_nodes=2,
             provisioning_s={"type": "constant", "value": 3})
    env, place, log = placement(p)
    first = place.find(p, 2, "c")
    place.hold(first, "a", "c", 2)
    node = place.find(p, 2, "c")
    assert node is not None and node is not first and node.ready is not None
    place.hold(node, "b", "c", 2)
    assert place.find(p, 1, "c") is None  # full, and the pool is at max_nodes
    env.run()
    assert env.now == 3_000_000 and node.ready is None
    assert [r[6] for r in log.placements] == ["node_ready", "placed", "node_added", "placed",
                                              "unplaced", "node_ready"]


def test_a_released_replicas_gpus_are_free_at_once():
    p = pool(gpus_per_node=4, nodes=1)
    _, place, _ = placement(p)
    node = place.find(p, 4, "c")
    place.hold(node, "a", "c", 4)
    assert place.find(p, 1, "c") is None
    place.release("a", "c")
    assert place.find(p, 4, "c") is node and node.free == 4
    place.release("a", "c")  # twice: nothing more
    assert node.free == 4


@settings(max_examples=200, deadline=None)
@given(per_node=st.integers(1, 8), nodes=st.integers(0, 3), extra=st.integers(0, 2),
       ops=st.lists(st.tuples(st.booleans(), st.integers(1, 9), st.integers(0, 30)),
                    max_size=60))
def test_gpu_counts_stay_within_every_node_and_add_up(per_node, nodes, extra, ops):
    p = pool(gpus_per_node=per_node, nodes=nodes, max_nodes=nodes + extra)
    _, place, _ = placement(p)
    holding: dict[str, int] = {}
    for n, (take, gpus, pick) in enumerate(ops):
        if take:
            node = place.find(p, gpus, "c")
            if node is None:
                assert gpus > per_node or (
                    len(place.nodes["p"]) == p.most
                    and all(x.free < gpus for x in place.nodes["p"]))
                continue
            place.hold(node, f"r{n}", "c", gpus)
            holding[f"r{n}"] = gpus
        elif holding:
            victim = sorted(holding)[pick % len(holding)]
            place.release(victim, "c")
            del holding[victim]
        all_nodes = place.nodes["p"]
        assert len(all_nodes) <= p.most
        assert all(0 <= x.free <= x.gpus == per_node for x in all_nodes)
        assert sum(x.gpus - x.free for x in all_nodes) == sum(holding.values())
        assert set(place.held) == set(holding)


# -- the scenario keys ------------------------------------------------------------------------

DEPLOYMENT = {
    "node_pools": [{"id": "h100", "gpu": "H100", "gpus_per_node": 2, "nodes": 1}],
    "models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                "configs": [{"id": "c", "replicas": {"min": 1, "max": 2}}]}],
}


def scenario_with(**changes):
    from tests.conftest import scenario

    deployment = {**DEPLOYMENT, **changes}
    return blis_simpy.run(scenario(deployment=deployment, workload={"num_requests": 5}))


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"node_pools": [{"id": "a", "gpu": "H100"}, {"id": "a", "gpu": "A100-80"}]},
     "deployment.node_pools[1].id", "duplicate"),
    ({"node_pools": [{"id": "a", "gpu": "H100", "nodes": 3, "max_nodes": 2}]},
     "deployment.node_pools[0].max_nodes", "below"),
    ({"node_pools": [{"id": "a", "gpu": "H100", "gpus_per_node": 0}]},
     "deployment.node_pools[0].gpus_per_node", ""),
    ({"node_pools": [{"id": "a", "gpu": "A100-80"}]},
     "deployment.models[0].configs[0].node_pool", "no node pool has H100"),
    ({"models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                  "configs": [{"id": "c", "node_pool": "nope"}]}]},
     "deployment.models[0].configs[0].node_pool", "no node pool 'nope'"),
    ({"models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                  "configs": [{"id": "c", "tp": 4}]}]},
     "deployment.models[0].configs[0].tp", "takes 4 GPUs"),
    ({"models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                  "configs": [{"id": "c", "replicas": {"min": 3, "max": 3}}]}]},
     "deployment.node_pools", "do not fit"),
])
def test_bad_node_pool_settings_fail_before_the_run_naming_the_key(changes, path, words):
    with pytest.raises(ScenarioError) as err:
        scenario_with(**changes)
    assert err.value.path == path
    assert words in str(err.value)


def test_a_config_naming_a_pool_without_node_pools_is_an_error():
    from tests.conftest import scenario

    deployment = {"models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                              "configs": [{"id": "c", "node_pool": "h100"}]}]}
    with pytest.raises(ScenarioError) as err:
        scenario(deployment=deployment)
    assert err.value.path == "deployment.models[0].configs[0].node_pool"


def test_no_node_pools_is_left_out_of_the_written_scenario():
    from tests.conftest import scenario

    deployment = {"models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                              "configs": [{"id": "c"}]}]}
    written = scenario(deployment=deployment).to_dict()["deployment"]
    assert "node_pools" not in written and "node_pool" not in written["models"][0]["configs"][0]


# -- whole runs -------------------------------------------------------------------------------

def test_bdd_scale_up_is_limited_by_the_free_gpus_of_the_pool():
    # Given a pool that may grow to three 2-GPU nodes, and a burst asking for 6 replicas
    grown = blis_simpy.run("node-pools")
    # Given the same pool held at its one node
    fixed = blis_simpy.run("node-pools", overrides={"deployment.node_pools[0].max_nodes": 1})
    for result, gpus in ((grown, 6), (fixed, 2)):
        replicas = result.replicas
        # Then no row of the replicas table holds more GPUs than the pool's nodes have
        assert (replicas.gpus <= gpus).all() and (replicas.pool_free_gpus >= 0).all()
        assert (replicas.gpus == replicas.replicas).all()  # one GPU per replica
        assert replicas.replicas.max() == gpus
        assert result.summary["deployment"]["node_pools"]["h100-nodes"]["peak_gpus_held"] \
            == gpus
    # And the fixed pool refused the rest, which the scale events say
    assert fixed.summary["deployment"]["node_pools"]["h100-nodes"]["replicas_not_placed"] > 0
    assert fixed.scale_events.reason.str.contains("0 of 4 placed").any()
    # And the grown pool's replicas on new nodes waited for them (8 s) before their own start-up
    placed = grown.placements.set_index("instance")
    late = placed[placed.node != "h100-nodes/node-0"]
    assert len(late) == 4 and set(late.node) == {"h100-nodes/node-1", "h100-nodes/node-2"}
    ready = grown.replicas[grown.replicas.routable == 6].time_s.min()
    assert ready == pytest.approx(late.placed_s.min() + 8 + 6 + 4)
    attainment = [r.summary["deployment"]["configs"]["llama8b-h100"]["slo_attainment"]
                  for r in (grown, fixed)]
    assert attainment[0] > attainment[1] + 0.05


def test_a_terminated_replica_gives_its_gpus_back():
    result = blis_simpy.run("node-pools")
    released = result.placements.dropna(subset=["released_s"])
    assert len(released) >= 1  # the scale-down after the burst
    last = result.replicas.iloc[-1]
    assert last.pool_free_gpus == 6 - last.gpus
