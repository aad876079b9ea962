"""The cluster control plane's behavioural contracts (seed 002: BC-1..BC-11, NC-1..NC-3,
EC-1..EC-2), one test (or a few) per contract, named after it."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator

import numpy as np
import pytest
import simpy

import blis_simpy
from blis_simpy.api import simulate
from blis_simpy.cluster.ordering import ADMISSION, CLUSTER_ARRIVAL, ROUTING, StageEvent
from blis_simpy.cluster.router_state import RouterState
from blis_simpy.cluster.snapshot import SnapshotProvider
from blis_simpy.config.errors import ScenarioError
from blis_simpy.config.resolve import latency_model, resolve
from blis_simpy.config.scenario import ObservabilityConfig, PolicyConfig, Refresh
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.request import Request
from blis_simpy.engine.simulation import Simulation, workload_requests
from blis_simpy.policies.admission import ADMISSION as ADMISSION_POLICIES
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.scheduler import SCHEDULER
from blis_simpy.policies.view import RequestView
from tests.conftest import scenario, trace_run_scenario, write_trace


def cluster(instances: int = 2, **changes):
    return resolve(scenario(cluster={"instances": instances, **changes.pop("cluster", {})},
                            **changes))


def trace_cluster(tmp_path, rows, instances=2, **changes):
    changes["cluster"] = {"instances": instances, **changes.get("cluster", {})}
    return resolve(trace_run_scenario(write_trace(tmp_path / "t.csv", rows), **changes))


def logged(sim: Simulation) -> list[tuple[int, str, str]]:
    """Instrument the gateway stages and instance steps: (time, kind, detail) in run order."""
    log: list[tuple[int, str, str]] = []
    gw = sim.gateway
    arrive, admit, route = gw.arrive, gw._admit, gw._route

    def on_arrive(req):
        log.append((sim.env.now, "arrival", req.name))
        arrive(req)

    def on_admit(event):
        log.append((sim.env.now, "admission", event.value.name))
        admit(event)

    def on_route(event):
        log.append((sim.env.now, "routing", event.value.name))
        route(event)

    gw.arrive, gw._admit, gw._route = on_arrive, on_admit, on_route
    for inst in sim.instances:
        step = inst._step

        def on_step(step=step, inst=inst):
            log.append((sim.env.now, "step", inst.name))
            return step()

        inst._step = on_step
    return log


def test_bc1_each_request_enters_as_a_cluster_arrival_at_its_arrival_time():
    sim = Simulation(cluster(3))
    log = logged(sim)
    sim.run()
    arrivals = [(t, name) for t, kind, name in log if kind == "arrival"]
    by_name = {r.name: r for r in sim.requests}
    assert len(arrivals) == len(sim.requests) == 40
    assert all(t == by_name[name].arrival for t, name in arrivals)


def test_bc2_admission_then_routing_after_their_latencies():
    sim = Simulation(cluster(2, cluster={"admission_latency_us": 300,
                                         "routing_latency_us": 700}))
    sim.run()
    for req in sim.requests:
        assert req.admitted_at == req.arrival + 300
        assert req.routed_at == req.arrival + 1000


def test_bc2_control_plane_latency_counts_in_ttft(tmp_path):
    rows = [(0.0, list(range(64)), 3)]
    plain = blis_simpy.run(trace_cluster(tmp_path, rows))
    slow = blis_simpy.run(trace_cluster(
        tmp_path, rows, cluster={"admission_latency_us": 300, "routing_latency_us": 700}))
    assert slow.requests.ttft_ms[0] == pytest.approx(plain.requests.ttft_ms[0] + 1.0)


def test_bc3_routing_injects_into_the_chosen_instance_at_routing_time():
    sim = Simulation(cluster(3, cluster={"routing_latency_us": 50}))
    sim.run()
    delay = latency_model(sim.scenario).queue_delay
    for i, req in enumerate(sim.requests):
        assert req.instance == i % 3  # round-robin's choice
        assert req.queued_at == req.routed_at + delay(req.input_len)
    result = blis_simpy.run(sim.scenario)
    assert (result.requests.instance == [f"instance_{i % 3}" for i in range(40)]).all()


def test_bc4_stage_priorities_order_same_time_events():
    """At one time: cluster arrivals, then admissions, then routings, then instance events,
    whatever order they were scheduled in; within a type, scheduling order."""
    env = simpy.Environment()
    order: list[str] = []

    def note(name):
        return lambda event: order.append(name)

    env.timeout(5).callbacks.append(note("instance step"))
    StageEvent(env, 5, ROUTING, callback=note("routing A"))
    StageEvent(env, 5, ADMISSION, callback=note("admission A"))
    StageEvent(env, 5, CLUSTER_ARRIVAL, callback=note("arrival A"))
    StageEvent(env, 5, ROUTING, callback=note("routing B"))
    StageEvent(env, 5, CLUSTER_ARRIVAL, callback=note("arrival B"))
    env.run()
    assert order == ["arrival A", "arrival B", "admission A", "routing A", "routing B",
                     "instance step"]


def test_bc4_cluster_events_precede_instance_events(tmp_path):
    """Requests arriving exactly when a step starts: all gateway stages at that time run
    before the step; same-time arrivals all precede their admissions and routings."""
    probe = Simulation(trace_cluster(tmp_path, [(0.0, list(range(32)), 50)], 1))
    probe.run()
    boundary = probe.instances[0].steps[3][0]  # a time at which a step starts
    rows = [(0.0, list(range(32)), 50), (boundary / 1e6, list(range(100, 132)), 2),
            (boundary / 1e6, list(range(200, 232)), 2)]
    sim = Simulation(trace_cluster(tmp_path, rows, 1))
    log = logged(sim)
    sim.run()
    at_boundary = [kind for t, kind, _ in log if t == boundary]
    assert at_boundary == ["arrival", "arrival", "admission", "admission", "routing",
                           "routing", "step"]


def test_bc5_snapshot_is_an_immutable_value_stamped_with_its_time():
    sim = Simulation(cluster(1))
    provider = sim.gateway.snapshots
    snap = provider.snapshot(0, 500)
    assert snap.timestamp == 500 and snap.id == "instance_0"
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.queue_depth = 9  # type: ignore[misc]
    sim.instances[0].wait_queue.append(next(iter(workload_requests(sim.scenario))))
    assert snap.queue_depth == 0
    assert provider.snapshot(0, 501).queue_depth == 1


def make_instance(env, kv_blocks=100):
    s = resolve(scenario(engine={"kv_blocks": kv_blocks}))
    return Instance(env, 0, latency_model(s), s.engine,
                    SCHEDULER.create(PolicyConfig("fcfs"), "s"),
                    PRIORITY.create(PolicyConfig("constant"), "p"))


def request(i: int, tokens: int = 16) -> Request:
    return Request(i, 0, np.arange(tokens) + 1000 * i, np.arange(4))


def test_bc6_immediate_fields_reread_periodic_fields_wait_for_their_interval():
    env = simpy.Environment()
    inst = make_instance(env)
    config = ObservabilityConfig(kv_utilization=Refresh("periodic", 0.001))  # 1000 µs
    provider = SnapshotProvider([inst], config, [0], [0])
    first = provider.snapshot(0, 500)
    inst.wait_queue.append(request(1))
    req = request(2)
    req.hash_blocks(16)
    inst.kv.allocate(req, 0, 16 * 10)
    second = provider.snapshot(0, 600)
    assert second.queue_depth == 1  # immediate: re-read
    assert second.kv_utilization == first.kv_utilization == 0.0  # periodic: not yet
    assert provider.snapshot(0, 1500).kv_utilization == pytest.approx(0.1)


def test_bc6_on_demand_fields_change_only_on_refresh_all():
    env = simpy.Environment()
    inst = make_instance(env)
    provider = SnapshotProvider([inst], ObservabilityConfig(queue_depth=Refresh("on-demand")),
                                [0], [0])
    inst.wait_queue.append(request(1))
    assert provider.snapshot(0, 10).queue_depth == 0
    provider.refresh_all(20)
    assert provider.snapshot(0, 30).queue_depth == 1


def test_bc7_default_observability_is_immediate_for_load_fields():
    config = ObservabilityConfig()
    for name in ("queue_depth", "batch_size", "kv_utilization"):
        assert getattr(config, name).mode == "immediate"
    env = simpy.Environment()
    inst = make_instance(env)
    provider = SnapshotProvider([inst], config, [0], [0])
    provider.snapshot(0, 0)
    inst.wait_queue.append(request(1))
    inst.running.append(request(2))
    req = request(3)
    req.hash_blocks(16)
    inst.kv.allocate(req, 0, 32)
    snap = provider.snapshot(0, 0)
    assert (snap.queue_depth, snap.batch_size, snap.free_kv_blocks) == (1, 1, 98)


def test_bc8_observation_methods_read_queue_batch_and_kv():
    env = simpy.Environment()
    inst = make_instance(env, kv_blocks=100)
    for i in range(3):
        inst.wait_queue.append(request(i))
    for i in range(5):
        inst.running.append(request(10 + i))
    holder = request(99, tokens=16 * 40)
    holder.hash_blocks(16)
    assert inst.kv.allocate(holder, 0, 16 * 40)
    snap = SnapshotProvider([inst], ObservabilityConfig(), [0], [0]).snapshot(0, 0)
    assert snap.queue_depth == 3
    assert snap.batch_size == 5
    assert snap.kv_utilization == 0.4
    assert snap.free_kv_blocks == 60


def view(tokens: int = 100, tenant: str = "") -> RequestView:
    return RequestView("request_0", 0, tokens, tenant, "", ())


def test_bc9_always_admit_admits_every_request():
    policy = ADMISSION_POLICIES.create(PolicyConfig("always-admit"), "a")
    state = RouterState()
    for tokens, clock in [(1, 0), (10**6, 5), (7, 10**9)]:
        decision = policy.decide(view(tokens), state, clock)
        assert (decision.action, decision.reason) == ("admit", "")


def test_bc10_token_bucket_admits_when_tokens_cover_the_cost_and_deducts_them():
    policy = ADMISSION_POLICIES.create(
        PolicyConfig("token-bucket", {"capacity": 100, "refill_per_s": 1000}), "a")
    state = RouterState()
    assert policy.decide(view(60), state, 0).action == "admit"  # 100 -> 40
    assert policy.decide(view(50), state, 0).action == "reject"  # 40 < 50, nothing taken
    assert policy.decide(view(40), state, 0).action == "admit"  # 40 -> 0
    assert policy.decide(view(10), state, 9_999).action == "reject"  # 9.999 tokens
    assert policy.decide(view(10), state, 10_000).action == "admit"  # refilled to 10


def bare_run(s):
    """The single-instance engine without the control plane: requests go straight into one
    instance at their arrival time."""
    env = simpy.Environment()
    inst = Instance(env, 0, latency_model(s), s.engine,
                    SCHEDULER.create(PolicyConfig("fcfs"), "s"),
                    PRIORITY.create(PolicyConfig("constant"), "p"),
                    idle_from_last_step_start=s.compat == "blis")
    requests = list(workload_requests(s))

    def source() -> Generator[simpy.Event, None, None]:
        for req in requests:
            if req.arrival > env.now:
                yield env.timeout(req.arrival - env.now)
            inst.accept(req)

    env.process(source())
    env.run()
    return requests, inst


@pytest.mark.parametrize("compat", ["none", "blis"])
def test_bc11_one_instance_cluster_matches_the_bare_engine(compat):
    s = resolve(scenario(compat=compat, engine={"kv_blocks": 400},
                         workload={"num_requests": 80, "rate_per_s": 40}))
    bare, inst = bare_run(s)
    sim = Simulation(s)
    sim.run()
    fields = ("arrival", "queued_at", "first_scheduled", "first_token_at", "completed_at",
              "emitted", "preemptions", "cached_tokens")
    assert [[getattr(r, f) for f in fields] for r in bare] == \
        [[getattr(r, f) for f in fields] for r in sim.requests]
    assert inst.steps == sim.instances[0].steps


def test_bc11_online_round_robin_is_the_old_i_mod_n_dispatch():
    result = blis_simpy.run(cluster(4))
    assert list(result.requests.instance) == [f"instance_{i % 4}" for i in range(40)]


def test_nc1_no_request_is_dispatched_before_the_event_loop():
    sim = Simulation(cluster(3, cluster={"record_decisions": True}))
    assert sim.requests == []
    assert all(not i.wait_queue and not i.running and not i.steps for i in sim.instances)
    assert sim.gateway.pending == [0, 0, 0]
    sim.run()
    routed = [d for d in sim.gateway.decisions if d[2] == "routing"]
    assert len(routed) == len(sim.requests)  # every instance request came through routing
    assert all(r.routed_at >= r.arrival for r in sim.requests)


def test_nc2_snapshots_share_no_state():
    sim = Simulation(cluster(1))
    provider = sim.gateway.snapshots
    first = provider.snapshot(0, 0)
    sim.instances[0].wait_queue.append(request(1))
    sim.gateway.pending[0] = 5
    second = provider.snapshot(0, 1)
    assert (first.queue_depth, first.pending_requests) == (0, 0)
    assert (second.queue_depth, second.pending_requests) == (1, 5)
    with pytest.raises(TypeError):
        first.extended["x"] = 1.0  # type: ignore[index]


def test_nc3_repeated_cluster_runs_are_bit_identical():
    s = cluster(3, policies={"routing": {"type": "weighted"}},
                workload={"num_requests": 60, "rate_per_s": 50, "prefix_tokens": 48})
    runs = [blis_simpy.run(s) for _ in range(3)]
    for other in runs[1:]:
        assert other.summary == runs[0].summary
        assert other.requests.equals(runs[0].requests)
        assert other.steps.equals(runs[0].steps)


def test_ec1_unknown_admission_policy_fails_before_the_run_naming_valid_ones():
    s = cluster(2, policies={"admission": {"type": "bouncer"}})
    with pytest.raises(ScenarioError) as err:
        Simulation(s)
    assert err.value.path == "policies.admission.type"
    assert "bouncer" in str(err.value)
    for name in ("always-admit", "token-bucket", "reject-all"):
        assert name in err.value.valid


def test_ec2_rejected_requests_never_reach_an_instance_and_are_counted():
    s = cluster(2, policies={"admission": {"type": "token-bucket",
                                           "params": {"capacity": 900, "refill_per_s": 100}}})
    sim = Simulation(s)
    sim.run()
    result = simulate(Simulation(s))
    rejected = [r for r in sim.requests if r.reject_reason == "insufficient tokens"]
    assert rejected
    assert all(r.instance == -1 and r.queued_at == -1 for r in rejected)
    assert result.summary["rejected_requests"] == len(rejected)
    per_instance = result.summary["instances"]
    assert sum(i["injected_requests"] for i in per_instance) == 40 - len(rejected)
    assert set(result.requests[result.requests.final_state == "rejected"].instance) == {""}


def test_periodic_field_is_read_on_first_use_not_zero_until_the_interval():
    """The reference's periodic KV fields read 0 until the clock passes the interval (its
    quirk §9.4); here the first read is live."""
    env = simpy.Environment()
    inst = make_instance(env)
    req = request(2)
    req.hash_blocks(16)
    inst.kv.allocate(req, 0, 16 * 10)
    config = ObservabilityConfig(kv_utilization=Refresh("periodic", 0.05))
    snap = SnapshotProvider([inst], config, [0], [0]).snapshot(0, 100)
    assert snap.kv_utilization == pytest.approx(0.1)


def test_recorded_routing_decisions_carry_scores_and_top_k(tmp_path):
    s = cluster(3, cluster={"record_decisions": True, "top_k": 2},
                policies={"routing": {"type": "least-loaded"}})
    result = blis_simpy.run(s)
    routing = result.decisions[result.decisions.stage == "routing"]
    admission = result.decisions[result.decisions.stage == "admission"]
    assert len(routing) == len(admission) == 40
    assert (routing.top_candidates.str.count("=") == 2).all()
    first = routing.iloc[0]
    assert first.instance == "instance_0" and first.top_candidates.startswith("instance_0=")
    result.save(tmp_path / "out", "csv")
    assert (tmp_path / "out" / "decisions.csv").is_file()
