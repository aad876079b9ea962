"""The public lifecycle: a Simulation exposes its fleet, pools, gateway and autoscalers; any
instance can be drained, terminated or failed through public methods, at any time and in any
order, and the gateway's in-flight counts stay exact (checks=True raises on a negative or
drifting count)."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.api import prepare, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.failure import Failure
from blis_simpy.core.request import Request
from blis_simpy.core.snapshot import Lifecycle
from tests.cluster.autoscale_helpers import scenario as autoscaled
from tests.conftest import scenario


def at(env, when_us, action):
    yield env.timeout(when_us)
    action()


def test_a_simulation_exposes_its_fleet_pools_gateway_and_autoscalers():
    sim = prepare(scenario(cluster={"instances": 3}))
    assert [inst.id for inst in sim.fleet] == ["instance_0", "instance_1", "instance_2"]
    assert len(sim.pools) == 1 and sim.pools[0].members == list(sim.fleet)
    assert all(inst.home is sim.pools[0] for inst in sim.fleet)
    assert sim.gateway.fleet is sim.fleet and sim.autoscalers == []
    deployed = prepare(Scenario.from_dict(autoscaled({"type": "threshold"}, rate=4,
                                                     duration=1)))
    assert [scaler.pool for scaler in deployed.autoscalers] == deployed.pools
    assert all(scaler.process is not None and scaler.process.is_alive
               for scaler in deployed.autoscalers)


@pytest.mark.parametrize("policy", ["wait", "immediate", "redirect"])
def test_draining_any_instance_finishes_or_hands_back_its_requests(policy):
    sim = prepare(scenario(cluster={"instances": 2}), checks=True)
    pool, victim = sim.pools[0], sim.fleet.get("instance_1")
    sim.env.process(at(sim.env, 500_000, lambda: pool.drain(victim, policy)))
    result = simulate(sim)
    assert victim.state is Lifecycle.TERMINATED and not victim.routable
    assert result.summary["completed_requests"] == 40
    late = result.requests[result.requests.routed_s > 0.5]
    assert set(late.instance) == {"instance_0"}


def test_terminating_a_busy_instance_hands_everything_back_at_once():
    sim = prepare(scenario(cluster={"instances": 2}), checks=True)
    pool, victim = sim.pools[0], sim.fleet.get("instance_0")
    sim.env.process(at(sim.env, 400_000, lambda: pool.terminate(victim)))
    result = simulate(sim)
    assert victim.state is Lifecycle.TERMINATED
    assert result.summary["completed_requests"] == 40
    assert sim.scale_log.lost  # the work it had done was discarded


def test_lifecycle_calls_in_any_order_keep_the_counts_exact():
    """Drain, then fail, then terminate the same instance, and fail a drained one: every
    request still ends once, and no count goes negative (checks=True would raise)."""
    sim = prepare(scenario(cluster={"instances": 3}), checks=True)
    pool = sim.pools[0]
    a, b = sim.fleet.get("instance_0"), sim.fleet.get("instance_1")
    sim.env.process(at(sim.env, 300_000, lambda: pool.drain(a)))
    sim.env.process(at(sim.env, 350_000, lambda: a.fail(Failure(0.1))))
    sim.env.process(at(sim.env, 360_000, lambda: pool.terminate(a)))
    sim.env.process(at(sim.env, 400_000, lambda: b.fail(Failure(0.2))))
    sim.env.process(at(sim.env, 450_000, lambda: pool.drain(b)))  # failed: not drained
    sim.env.process(at(sim.env, 700_000, lambda: pool.terminate(b)))
    result = simulate(sim)
    states = result.requests.final_state.value_counts().to_dict()
    assert sum(states.values()) == 40 and set(states) <= {"completed", "failed"}
    assert all(count == 0 for count in sim.gateway.in_flight.values())
    assert all(count == 0 for count in sim.gateway.pending.values())


def test_abandon_then_hand_back_cannot_count_a_request_twice():
    """The issue's failure injector of public parts: `inst.abandon(req)` reports the request
    finished, `gateway.hand_back` then finds it no longer counted there (main went to -13)."""
    sim = prepare(scenario(cluster={"instances": 2}), checks=True)
    inst = sim.fleet.get("instance_1")

    def crash():
        for req in [*inst.wait_queue, *inst.running]:
            inst.abandon(req)
            sim.gateway.hand_back(inst.id, req)

    sim.env.process(at(sim.env, 500_000, crash))
    simulate(sim)
    assert sim.gateway.in_flight["instance_1"] == 0


def test_checks_raise_on_a_negative_count():
    sim = prepare(scenario(), checks=True)
    sim.gateway.in_flight["instance_0"] = 0
    req = Request(0, 0, np.arange(3), np.arange(2))
    req.counted, req.queued_at = "instance_0", 5
    with pytest.raises(InvariantError, match="went negative"):
        sim.gateway.handed_off("instance_0", req)


def test_checks_raise_on_a_drifting_count():
    sim = prepare(scenario(), checks=True)
    sim.gateway.in_flight["instance_0"] = 2  # nothing is in flight there
    with pytest.raises(InvariantError, match="drifted"):
        sim.run()


def test_an_instance_drains_and_terminates_through_its_own_methods():
    sim = prepare(scenario(cluster={"instances": 3}), checks=True)
    a, b = sim.fleet.get("instance_0"), sim.fleet.get("instance_1")
    sim.env.process(at(sim.env, 300_000, lambda: a.drain("redirect")))
    sim.env.process(at(sim.env, 400_000, b.terminate))
    result = simulate(sim)
    assert a.state is Lifecycle.TERMINATED and b.state is Lifecycle.TERMINATED
    assert result.summary["completed_requests"] == 40
    assert set(result.requests[result.requests.routed_s > 0.4].instance) == {"instance_2"}
