"""The instance as a SimPy process: `instance.process` runs its step loop; interrupting it
crashes the instance as a breakdown interrupts a machine in SimPy's machine-shop example.

A crash loses every request in the instance (in its queueing delay, waiting or running) and
its KV cache; the gateway sends the lost requests again; the instance is closed to traffic
while down and serves again once repaired."""

from __future__ import annotations

import pytest
import simpy

from blis_simpy.api import prepare, simulate
from blis_simpy.core.failure import Failure
from blis_simpy.core.records import Recorder
from blis_simpy.core.snapshot import Lifecycle
from tests.conftest import scenario


def sim_of(**changes):
    return prepare(scenario(**changes), recorder=Recorder(events=True), checks=True)


def breakdown(env, instance, at_us, failure):
    """SimPy's machine-shop breakdown, for one instance: wait, then interrupt its process."""
    yield env.timeout(at_us)
    instance.process.interrupt(failure)


@pytest.mark.parametrize("compat", ["none", "blis"])
def test_every_instance_has_a_live_process(compat):
    extra = {"workload": {"arrival": "constant"}} if compat == "blis" else {}
    sim = sim_of(compat=compat, cluster={"instances": 2}, **extra)
    for inst in sim.fleet:
        assert isinstance(inst.process, simpy.Process) and inst.process.is_alive
    simulate(sim)
    assert all(inst.process.is_alive for inst in sim.fleet)


def test_a_crash_loses_the_requests_and_the_gateway_sends_them_again():
    sim = sim_of(cluster={"instances": 2})
    victim = sim.fleet.get("instance_0")
    sim.env.process(breakdown(sim.env, victim, 600_000, Failure(repair_s=0.5)))
    result = simulate(sim)
    faults = result.faults
    lost = faults[faults.event == "lost"]
    assert len(lost) > 0 and set(lost.instance) == {"instance_0"}
    assert set(faults[faults.event == "retry"].request) == set(lost.request)
    assert result.summary["completed_requests"] == 40  # every lost one served again
    assert result.summary["faults"]["crashes"] == 1
    assert result.summary["faults"]["repairs"] == 1
    # nothing is routed to it while it is down (0.6 s to 1.1 s), and it serves again after
    events = result.events
    routed = [(t, where) for t, kind, _, where in events if kind == "routing"]
    assert not [t for t, where in routed if where == "instance_0" and 600_000 <= t < 1_100_000]
    assert [t for t, where in routed if where == "instance_0" and t >= 1_100_000]
    assert victim.state is Lifecycle.ACTIVE and victim.failures == 1
    assert all(count == 0 for count in sim.gateway.in_flight.values())


def test_a_lost_request_restarts_from_scratch_its_latency_from_its_first_arrival():
    sim = sim_of(cluster={"instances": 2})
    sim.env.process(breakdown(sim.env, sim.fleet.get("instance_1"), 600_000, Failure()))
    result = simulate(sim)
    faults = result.faults
    retried = set(faults[faults.event == "retry"].request)
    rows = result.requests.set_index("id").loc[sorted(retried)]
    assert (rows.final_state == "completed").all()
    assert (rows.instance == "instance_0").all()  # the only one left
    assert (rows.arrival_s < 0.6).all() and (rows.completion_s > 0.6).all()
    assert ((rows.e2e_ms / 1000 - (rows.completion_s - rows.arrival_s)).abs() < 1e-6).all()


def test_a_failure_never_repaired_ends_the_process():
    sim = sim_of(cluster={"instances": 2})
    victim = sim.fleet.get("instance_0")
    sim.env.process(breakdown(sim.env, victim, 300_000, None))  # a cause-less interrupt
    result = simulate(sim)
    assert victim.state is Lifecycle.DEAD and not victim.process.is_alive
    assert victim.routable is False
    victim.fail(Failure(1.0))  # does nothing to an instance down for good
    assert result.summary["faults"]["availability"] < 1


def test_an_idle_instance_interrupted_while_it_waits_on_its_inbox():
    """The loop waits on an inbox get when idle; the crash cancels it, so a request that
    arrives after the repair is not swallowed by a get nobody waits on."""
    sim = sim_of(workload={"num_requests": 3, "rate_per_s": 1, "arrival": "constant",
                           "output": {"mean": 10, "stdev": 0, "min": 10, "max": 10}})
    inst = sim.fleet.get("instance_0")
    idle = []

    def look(env):
        yield env.timeout(1_499_999)
        idle.append(inst.idle())

    sim.env.process(look(sim.env))
    sim.env.process(breakdown(sim.env, inst, 1_500_000, Failure(repair_s=0.1)))
    result = simulate(sim)
    assert idle == [True] and result.summary["completed_requests"] == 3
    assert not result.faults[result.faults.event == "lost"].shape[0]  # it held nothing


def test_an_interrupt_while_down_extends_the_repair_to_the_later_time():
    sim = sim_of(cluster={"instances": 2})
    inst = sim.fleet.get("instance_0")
    sim.env.process(breakdown(sim.env, inst, 200_000, Failure(repair_s=0.3)))
    sim.env.process(breakdown(sim.env, inst, 300_000, Failure(repair_s=0.5)))
    result = simulate(sim)
    faults = result.faults
    assert list(faults[faults.event == "crash"].time_s) == [0.2]
    assert list(faults[faults.event == "repair"].time_s) == [pytest.approx(0.8)]


def test_the_kv_cache_is_lost_with_the_instance():
    sim = sim_of(engine={"kv_blocks": 2000}, workload={"prefix_tokens": 256})
    inst = sim.fleet.get("instance_0")
    seen = {}

    def look(env):
        yield env.timeout(1_000_000)
        seen["before"] = inst.kv.used + len(inst.kv.index)
        inst.fail(Failure(repair_s=0.01))
        yield env.timeout(1)
        seen["after"] = inst.kv.used, len(inst.kv.index), inst.kv.free_blocks

    sim.env.process(look(sim.env))
    simulate(sim)
    assert seen["before"] > 0
    assert seen["after"] == (0, 0, 2000)


def test_compat_instances_fail_too():
    sim = sim_of(compat="blis", cluster={"instances": 2}, workload={"arrival": "constant"})
    sim.env.process(breakdown(sim.env, sim.fleet.get("instance_0"), 500_000, Failure(0.2)))
    result = simulate(sim)
    assert result.summary["completed_requests"] == 40
    assert result.summary["faults"]["lost_requests"] > 0
