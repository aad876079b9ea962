"""The cluster control plane's behavioural contracts (seed 002: BC-1..BC-11, NC-1..NC-3,
EC-1..EC-2), one test (or a few) per contract, named after it."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
import simpy

import blis_simpy
from blis_simpy.api import build, simulate
from blis_simpy.cluster.snapshot import SnapshotProvider, Snapshots
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import ObservabilityConfig, PolicyConfig, Refresh
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.ordering import ADMISSION, CLUSTER_ARRIVAL, ROUTING, StageEvent
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request, RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot, Role
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.latency import latency_model
from blis_simpy.policies.admission import ADMISSION as ADMISSION_POLICIES
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.scheduler import SCHEDULER
from blis_simpy.sim.modes import mode_of
from blis_simpy.workload.source import requests_of
from tests.conftest import scenario, trace_run_scenario, write_trace


def cluster(instances: int = 2, **changes):
    return resolve(scenario(cluster={"instances": instances, **changes.pop("cluster", {})},
                            **changes))


def trace_cluster(tmp_path, rows, instances=2, **changes):
    changes["cluster"] = {"instances": instances, **changes.get("cluster", {})}
    return resolve(trace_run_scenario(write_trace(tmp_path / "t.csv", rows), **changes))


def traced(s) -> blis_simpy.Result:
    """Run with the ordered event log on: (time, kind, subject, where) as things happened."""
    return blis_simpy.run(s, recorder=Recorder(events=True))


def us(seconds) -> int:
    return round(float(seconds) * 1e6)


def test_bc1_each_request_enters_as_a_cluster_arrival_at_its_arrival_time():
    result = traced(cluster(3))
    arrivals = {name: t for t, kind, name, _ in result.events if kind == "arrival"}
    assert len(arrivals) == len(result.requests) == 40
    for row in result.requests.itertuples():
        assert arrivals[row.id] == us(row.arrival_s)


def test_bc2_admission_then_routing_after_their_latencies():
    result = blis_simpy.run(cluster(2, cluster={"admission_latency_us": 300,
                                                "routing_latency_us": 700}))
    for row in result.requests.itertuples():
        assert us(row.admitted_s) == us(row.arrival_s) + 300
        assert us(row.routed_s) == us(row.arrival_s) + 1000


def test_bc2_control_plane_latency_counts_in_ttft(tmp_path):
    rows = [(0.0, list(range(64)), 3)]
    plain = blis_simpy.run(trace_cluster(tmp_path, rows))
    slow = blis_simpy.run(trace_cluster(
        tmp_path, rows, cluster={"admission_latency_us": 300, "routing_latency_us": 700}))
    assert slow.requests.ttft_ms[0] == pytest.approx(plain.requests.ttft_ms[0] + 1.0)


def test_bc3_routing_injects_into_the_chosen_instance_at_routing_time():
    s = cluster(3, cluster={"routing_latency_us": 50})
    result = traced(s)
    delay = latency_model(s).queue_delay
    routed = {name: where for _, kind, name, where in result.events if kind == "routing"}
    for i, row in enumerate(result.requests.itertuples()):
        assert row.instance == routed[row.id] == f"instance_{i % 3}"  # round-robin's choice
        assert us(row.queued_s) == us(row.routed_s) + delay(row.input_tokens)


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
    probe = blis_simpy.run(trace_cluster(tmp_path, [(0.0, list(range(32)), 50)], 1))
    boundary = us(probe.steps.start_s[3])  # a time at which a step starts
    rows = [(0.0, list(range(32)), 50), (boundary / 1e6, list(range(100, 132)), 2),
            (boundary / 1e6, list(range(200, 232)), 2)]
    result = traced(trace_cluster(tmp_path, rows, 1))
    at_boundary = [kind for t, kind, _, _ in result.events if t == boundary]
    assert at_boundary[:7] == ["arrival", "arrival", "admission", "admission", "routing",
                               "routing", "step"]
    assert not {"arrival", "admission", "routing"} & set(at_boundary[7:])


def one_instance(kv_blocks: int = 100, **changes):
    """A built one-instance cluster: its instance and its gateway's snapshot provider."""
    sim = build(resolve(scenario(engine={"kv_blocks": kv_blocks}, **changes)))
    return sim.fleet.get("instance_0"), sim.gateway


def request(i: int, tokens: int = 16) -> Request:
    req = Request(i, 0, np.arange(tokens) + 1000 * i, np.arange(4))
    req.observe(16)
    return req


def test_bc5_snapshot_is_an_immutable_value_stamped_with_its_time():
    inst, gateway = one_instance()
    provider = gateway.snapshots
    snap = provider.snapshot(inst, 500)
    assert snap.timestamp == 500 and snap.id == "instance_0" and snap.role == "monolithic"
    with pytest.raises(AttributeError):  # immutable
        snap.queue_depth = 9  # type: ignore[misc]
    inst.wait_queue.append(request(1))
    assert snap.queue_depth == 0
    assert provider.snapshot(inst, 501).queue_depth == 1


def test_bc6_immediate_fields_reread_periodic_fields_wait_for_their_interval():
    inst, _ = one_instance()
    config = ObservabilityConfig(kv_utilization=Refresh("periodic", 0.001))  # 1000 µs
    provider = SnapshotProvider(config, {}, {})
    first = provider.snapshot(inst, 500)
    inst.wait_queue.append(request(1))
    req = request(2, tokens=16 * 10)
    inst.kv.allocate(req, 0, 16 * 10)
    second = provider.snapshot(inst, 600)
    assert second.queue_depth == 1  # immediate: re-read
    assert second.kv_utilization == first.kv_utilization == 0.0  # periodic: not yet
    assert second.free_kv_blocks == 90  # free blocks are always fresh (seed G.2)
    assert provider.snapshot(inst, 1500).kv_utilization == pytest.approx(0.1)


def test_bc6_on_demand_fields_change_only_when_a_policy_asks():
    inst, _ = one_instance()
    provider = SnapshotProvider(ObservabilityConfig(queue_depth=Refresh("on-demand")), {}, {})
    assert provider.snapshot(inst, 10).queue_depth == 0  # first sight reads the value
    inst.wait_queue.append(request(1))
    assert provider.snapshot(inst, 20).queue_depth == 0  # then it waits for a refresh
    view = Snapshots(provider, [inst], 30)
    assert view[0].queue_depth == 0
    view.refresh()  # what a policy calls when it wants fresh data
    assert view[0].queue_depth == 1
    assert provider.snapshot(inst, 40).queue_depth == 1


def test_bc6_in_flight_pending_and_estimated_wait_are_always_fresh():
    inst, _ = one_instance()
    pending, in_flight = {"instance_0": 0}, {"instance_0": 0}
    lazy = Refresh("on-demand")
    provider = SnapshotProvider(ObservabilityConfig(queue_depth=lazy, kv_utilization=lazy),
                                pending, in_flight)
    before = provider.snapshot(inst, 0)
    pending["instance_0"], in_flight["instance_0"] = 2, 3
    inst.queued_tokens = 4096
    inst._record(0, 10_000, 0, 1, 1, 0, 0)  # one step row (start, duration, ...)
    after = provider.snapshot(inst, 1)
    assert (before.pending_requests, before.in_flight_requests) == (0, 0)
    assert (after.pending_requests, after.in_flight_requests) == (2, 3)
    assert before.estimated_wait_ms == 0.0 and after.estimated_wait_ms == 20.0  # 2 steps


def test_snapshot_reads_each_field_from_its_own_source():
    """Every field distinct, so a snapshot built with its fields out of order shows it."""
    inst, _ = one_instance()
    provider = SnapshotProvider(ObservabilityConfig(), {"instance_0": 3}, {"instance_0": 4})
    inst.wait_queue.append(request(1))
    inst.running.extend([request(2), request(3)])
    inst.kv.allocate(request(4, tokens=16 * 10), 0, 16 * 10)
    inst.kv.hits, inst.kv.misses = 1, 3
    inst.recent_ttft.append(2_000)
    inst.recent_tpot.append(5_000)
    inst.queued_tokens = 4096
    inst._record(0, 10_000, 0, 1, 1, 0, 0)  # one step row (start, duration, ...)
    snap = provider.snapshot(inst, 7)
    assert snap == InstanceSnapshot(
        id="instance_0", role=Role.MONOLITHIC, timestamp=7, queue_depth=1, batch_size=2,
        kv_utilization=0.1, free_kv_blocks=90, pending_requests=3, in_flight_requests=4,
        cache_hit_rate=0.25, recent_ttft_ms=2.0, recent_tpot_ms=5.0, estimated_wait_ms=20.0,
        kv_cpu_utilization=0.0)
    assert snap.effective_load == 1 + 2 + 3


def test_bc7_default_observability_is_immediate_for_load_fields():
    config = ObservabilityConfig()
    for name in ("queue_depth", "batch_size", "kv_utilization"):
        assert getattr(config, name).mode == "immediate"
    inst, _ = one_instance()
    provider = SnapshotProvider(config, {}, {})
    provider.snapshot(inst, 0)
    inst.wait_queue.append(request(1))
    inst.running.append(request(2))
    inst.kv.allocate(request(3, tokens=32), 0, 32)
    snap = provider.snapshot(inst, 0)
    assert (snap.queue_depth, snap.batch_size, snap.free_kv_blocks) == (1, 1, 98)


def test_bc8_observation_methods_read_queue_batch_and_kv():
    inst, _ = one_instance(kv_blocks=100)
    for i in range(3):
        inst.wait_queue.append(request(i))
    for i in range(5):
        inst.running.append(request(10 + i))
    holder = request(99, tokens=16 * 40)
    assert inst.kv.allocate(holder, 0, 16 * 40)
    snap = SnapshotProvider(ObservabilityConfig(), {}, {}).snapshot(inst, 0)
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
    recorder = Recorder()
    mode = mode_of(s)
    inst = Instance(env, "instance_0", latency_model(s), s.engine,
                    mode.pool(s.engine.kv_blocks or 0, s.engine.block_size),
                    SCHEDULER.create(PolicyConfig("fcfs"), "s"),
                    PRIORITY.create(PolicyConfig("constant"), "p"), recorder,
                    class_ranks=s.evaluation.ranks(),
                    reference_order=mode.reference_order)
    requests = list(requests_of(s, reference_draws=mode.reference_draws)[0])
    for req in requests:
        req.observe(s.engine.block_size)

    def source() -> Generator[simpy.Event, None, None]:
        for req in requests:
            if req.arrival > env.now:
                yield env.timeout(req.arrival - env.now)
            inst.accept(req)

    env.process(source())
    env.run()
    inst.finish()  # as the simulator does when its events are done
    return requests, inst


@pytest.mark.parametrize("compat", ["none", "blis"])
def test_bc11_one_instance_cluster_matches_the_bare_engine(compat):
    s = resolve(scenario(compat=compat, engine={"kv_blocks": 400},
                         workload={"num_requests": 80, "rate_per_s": 40}))
    bare, inst = bare_run(s)
    sim = build(s)
    sim.run()
    fields = ("arrival", "queued_at", "first_scheduled", "first_token_at", "completed_at",
              "emitted", "preemptions", "cached_tokens")
    assert [[getattr(r, f) for f in fields] for r in bare] == \
        [[getattr(r, f) for f in fields] for r in sim.recorder.requests]
    assert np.array_equal(inst.log.rows(), sim.recorder.instances[0].rows())


def test_bc11_online_round_robin_is_the_old_i_mod_n_dispatch():
    result = blis_simpy.run(cluster(4))
    assert list(result.requests.instance) == [f"instance_{i % 4}" for i in range(40)]


def test_nc1_no_request_is_dispatched_before_the_event_loop():
    sim = build(cluster(3, cluster={"trace_level": "decisions"}))
    assert sim.recorder.requests == []
    assert all(not i.wait_queue and not i.running and not i.steps for i in sim.fleet)
    assert sim.gateway.pending == {}
    sim.run()
    routed = [d for d in sim.recorder.decisions or () if d.stage == "routing"]
    requests = sim.recorder.requests
    assert len(routed) == len(requests)  # every instance request came through routing
    assert all(r.routed_at >= r.arrival for r in requests)


def test_nc2_snapshots_share_no_state():
    inst, gateway = one_instance()
    provider = gateway.snapshots
    first = provider.snapshot(inst, 0)
    inst.wait_queue.append(request(1))
    gateway.pending["instance_0"] = 5
    second = provider.snapshot(inst, 1)
    assert (first.queue_depth, first.pending_requests) == (0, 0)
    assert (second.queue_depth, second.pending_requests) == (1, 5)
    with pytest.raises(AttributeError):  # immutable
        first.pending_requests = 7  # type: ignore[misc]


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
        build(s)
    assert err.value.path == "policies.admission.type"
    assert "bouncer" in str(err.value)
    for name in ("always-admit", "token-bucket", "reject-all"):
        assert name in err.value.valid


def test_ec2_rejected_requests_never_reach_an_instance_and_are_counted():
    s = cluster(2, policies={"admission": {"type": "token-bucket",
                                           "params": {"capacity": 900, "refill_per_s": 100}}})
    result = simulate(build(s))
    rejected = result.requests[result.requests.reject_reason == "insufficient tokens"]
    assert len(rejected)
    assert (rejected.instance == "").all() and rejected.queued_s.isna().all()
    assert result.summary["rejected_requests"] == len(rejected)
    per_instance = result.summary["instances"]
    assert sum(i["injected_requests"] for i in per_instance) == 40 - len(rejected)
    assert set(result.requests[result.requests.final_state == "rejected"].instance) == {""}


def test_periodic_field_is_read_on_first_use_not_zero_until_the_interval():
    """The reference's periodic KV fields read 0 until the clock passes the interval (its
    quirk §9.4); here the first read is live."""
    inst, _ = one_instance()
    inst.kv.allocate(request(2, tokens=16 * 10), 0, 16 * 10)
    config = ObservabilityConfig(kv_utilization=Refresh("periodic", 0.05))
    snap = SnapshotProvider(config, {}, {}).snapshot(inst, 100)
    assert snap.kv_utilization == pytest.approx(0.1)


def test_recorded_routing_decisions_carry_scores_and_top_k(tmp_path):
    s = cluster(3, cluster={"trace_level": "decisions", "top_k": 2},
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


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded", "weighted",
                                     "prefix-affinity", "always-busiest"])
def test_every_routing_decision_records_its_candidates(routing):
    result = blis_simpy.run(cluster(3, cluster={"trace_level": "decisions"},
                                    policies={"routing": {"type": routing}}))
    routed = result.decisions[result.decisions.stage == "routing"]
    assert len(routed) == 40
    assert (routed.top_candidates.str.count(";") == 2).all()  # top 3 of 3 instances
    chosen_first = [text.split("=")[0] == instance for text, instance in
                    zip(routed.top_candidates, routed.instance, strict=True)]
    assert all(chosen_first)  # the chosen instance has the best score


def test_weighted_routing_decisions_carry_each_scorers_share():
    result = blis_simpy.run(cluster(2, cluster={"trace_level": "decisions", "top_k": 1},
                                    policies={"routing": {"type": "weighted"}}))
    first = result.decisions[result.decisions.stage == "routing"].top_candidates.iloc[0]
    name, rest = first.split("=", 1)
    assert name == "instance_0"
    assert "(prefix-affinity=" in rest and ",queue-depth=" in rest and ",kv-utilization=" in rest
