"""The autoscaler and actuation (issue 13): decision -> ready takes provisioning + load time;
nothing is routed to a replica that is not routable; drained replicas finish (wait) or hand
back (immediate, redirect) their requests and every request ends in exactly one terminal
state; replica counts stay within bounds (hypothesis); the oscillator produces oscillation
anomalies and threshold with a cooldown does not; with no autoscaler and one config the
outputs are those of the `cluster.instances` shorthand."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_simpy.cluster.actuation import DeploymentPool
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.records import Recorder
from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.metrics.columns import Table
from blis_simpy.sim.run import prepare, simulate
from tests.cluster.autoscale_helpers import run, run_with_log, scenario

TERMINAL = {"completed", "rejected", "timed_out"}
ALWAYS_UP = {"type": "oscillator"}
THRESHOLD = {"type": "threshold", "params": {"signal": "utilization", "up": 0.8,
                                             "down": 0.3, "cooldown_s": 5}}


def states_of(log) -> dict[str, list[tuple[int, str]]]:  # type: ignore[no-untyped-def]
    out: dict[str, list[tuple[int, str]]] = {}
    for time, instance, _, state in log.lifecycle:
        out.setdefault(instance, []).append((time, state))
    return out


def test_a_new_replica_is_ready_provisioning_plus_load_time_after_the_decision():
    data = scenario(ALWAYS_UP, pool={"min": 1, "max": 2, "initial": 1}, interval=3.0,
                    actuation={"provisioning_s": {"type": "constant", "value": 2.0},
                               "load_s": {"type": "constant", "value": 0.5}})
    result, sim = run_with_log(data)
    first = sim.scale_log.events[0]
    assert (first.action, first.before, first.after) == ("up", 1, 2)
    new = states_of(sim.scale_log)["instance_1"]
    assert new[:3] == [(first.time, "provisioning"), (first.time + 2_000_000, "loading"),
                       (first.time + 2_500_000, "active")]
    assert result.summary["deployment"]["configs"]["pool"]["time_to_ready_max_s"] == 2.5


def test_warm_up_slows_the_new_replicas_steps_through_the_step_time():
    actuation = {"provisioning_s": {"type": "constant", "value": 1.0},
                 "warmup": {"duration_s": 5.0, "curve": "step", "penalty": 3.0}}
    cold = run(scenario(ALWAYS_UP, pool={"min": 1, "max": 2, "initial": 1}, interval=2.0,
                        actuation=actuation))
    warm = run(scenario(ALWAYS_UP, pool={"min": 1, "max": 2, "initial": 1}, interval=2.0,
                        actuation={**actuation, "warmup": {"duration_s": 0.0}}))
    steps = cold.steps
    first_of_new = steps[steps.instance == "instance_1"].iloc[0]
    same = warm.steps[(warm.steps.instance == "instance_1")].iloc[0]
    assert first_of_new.start_s == same.start_s
    assert first_of_new.duration_ms == pytest.approx(3 * same.duration_ms, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("takes_traffic", [True, False])
@pytest.mark.parametrize("drain", ["wait", "immediate", "redirect"])
def test_no_request_is_routed_to_a_replica_that_is_not_routable(drain, takes_traffic):
    routed_to: list[Lifecycle] = []
    data = scenario({"type": "oscillator"}, rate=40, pool={"min": 1, "max": 3, "initial": 2},
                    interval=0.5, actuation={
                        "provisioning_s": {"type": "constant", "value": 0.3},
                        "warmup": {"duration_s": 0.4}, "warming_takes_traffic": takes_traffic,
                        "drain": {"policy": drain}})
    sim = prepare(Scenario.from_dict(data), checks=True)
    policy = sim.gateway.routing
    route = policy.route

    def spy(*args):  # type: ignore[no-untyped-def]
        decision = route(*args)  # the gateway hands the request to this instance
        target = sim.fleet.get(decision.target)
        assert target is not None
        routed_to.append(target.state)
        return decision

    policy.route = spy  # type: ignore[method-assign]
    simulate(sim)
    allowed = {Lifecycle.ACTIVE, Lifecycle.WARMING} if takes_traffic else {Lifecycle.ACTIVE}
    assert routed_to and set(routed_to) <= allowed


@pytest.mark.parametrize("drain", ["wait", "immediate", "redirect"])
def test_drained_replicas_finish_or_hand_back_and_every_request_ends_once(drain):
    data = scenario({"type": "oscillator"}, rate=60, pool={"min": 1, "max": 3, "initial": 3},
                    interval=0.7, actuation={"drain": {"policy": drain}})
    result, sim = run_with_log(data, recorder=Recorder(events=True), checks=True)
    requests = result.requests
    assert set(requests.final_state) == {"completed"}
    ended = Counter(name for _, kind, name, _ in result.events
                    if kind in ("completed", "timed_out"))
    assert set(ended.values()) == {1} and len(ended) == len(requests)
    lost = sim.scale_log.lost
    if drain == "wait":
        assert lost == []
    else:
        assert lost, "a drained replica handed nothing back"
        if drain == "redirect":  # only requests not yet running go back: no work lost
            assert all(tokens == 0 for *_, tokens in lost)
    drained = [i for i, rows in states_of(sim.scale_log).items()
               if any(s == "draining" for _, s in rows)]
    assert drained
    for instance in drained:  # terminated once nothing routed to it was left
        assert states_of(sim.scale_log)[instance][-1][1] == "terminated"
    assert result.summary["deployment"]["configs"]["pool"]["handed_back_requests"] == len(lost)


def test_wait_drain_timeout_hands_back_what_is_left():
    data = scenario({"type": "oscillator"}, rate=60, pool={"min": 1, "max": 2, "initial": 2},
                    interval=1.0, actuation={"drain": {"policy": "wait", "timeout_s": 0.05}})
    result, sim = run_with_log(data, checks=True)
    assert sim.scale_log.lost
    assert set(result.requests.final_state) == {"completed"}


def test_scale_down_victim_is_the_newest_not_yet_routable_then_the_least_loaded_newest():
    class Stub:
        def __init__(self, name: str, routable: bool) -> None:
            self.id, self.routable, self.state = name, routable, Lifecycle.ACTIVE

    class Gateway:
        def __init__(self) -> None:
            self.in_flight = {"a": 3, "b": 1, "c": 1}

    pool = DeploymentPool.__new__(DeploymentPool)
    pool.gateway = Gateway()  # type: ignore[assignment]
    pool.members = [Stub("a", True), Stub("b", True), Stub("c", True)]  # type: ignore[list-item]
    assert pool.victim().id == "c"  # fewest in flight (b, c), the newest of them
    pool.members.append(Stub("d", False))  # type: ignore[arg-type]
    pool.members.append(Stub("e", False))  # type: ignore[arg-type]
    assert pool.victim().id == "e"


def test_oscillator_raises_oscillation_anomalies_and_threshold_with_cooldown_does_not():
    load = {"rate": 40.0, "duration": 30.0, "pool": {"min": 1, "max": 4, "initial": 2}}
    oscillating = run(scenario({"type": "oscillator"}, **load))
    calm = run(scenario(THRESHOLD, **load))
    flaps = oscillating.anomalies[oscillating.anomalies.type == "scale_oscillation"]
    assert len(flaps) == 1  # one episode, the whole run long
    assert flaps.detail.iloc[0].startswith("pool: 77 reversals in 77 s (39 up, 39 down)")
    assert flaps.severity.iloc[0] == 1.0
    assert calm.summary["deployment"]["scale_ups"] + calm.summary["deployment"]["scale_downs"]
    assert calm.metrics["anomalies"].get("scale_oscillation", 0) == 0


def test_queue_depth_trigger_evaluates_between_polls():
    data = scenario({"type": "queue-depth", "params": {"up_per_replica": 2, "cooldown_s": 0}},
                    rate=60, interval=100.0, triggers={"queue_depth": 10, "min_gap_s": 0.5})
    result = run(data)
    events = result.scale_events
    assert len(events) and set(events.trigger) == {"queue_depth"}


def csv_text(table: Table) -> str:
    out = io.StringIO()
    for row in [list(table.columns), *table.rows()]:
        out.write(",".join(row) + "\n")
    return out.getvalue()


def test_one_config_without_autoscaler_runs_exactly_as_the_shorthand():
    data = scenario(None, pool={"min": 3, "max": 3, "initial": 3})
    shorthand = {k: v for k, v in data.items() if k != "deployment"}
    shorthand["cluster"] = {"instances": 3}
    pooled, short = run(data), run(shorthand)
    assert csv_text(pooled.request_table) == csv_text(short.request_table)
    assert csv_text(pooled.step_table) == csv_text(short.step_table)
    summary = dict(pooled.summary)
    deployment = summary.pop("deployment")
    assert summary == short.summary
    assert deployment["avg_replicas"] == pytest.approx(3.0)
    assert short.scale_event_table is None and "deployment" not in short.summary


def test_cost_is_replica_seconds_times_the_hourly_price():
    result = run(scenario(THRESHOLD, rate=40))
    config = result.summary["deployment"]["configs"]["pool"]
    assert config["cost"] == pytest.approx(config["replica_seconds"] * 3.6 / 3600)
    fixed = run(scenario(None, pool={"min": 2, "max": 2, "initial": 2}))
    seconds = fixed.summary["deployment"]["replica_seconds"]
    ended = max(fixed.steps.start_s + fixed.steps.duration_ms / 1000)
    assert seconds == pytest.approx(2 * ended, rel=1e-3)


def test_same_seed_same_scaling():
    data = scenario(THRESHOLD, rate=40, actuation={
        "provisioning_s": {"type": "exponential", "mean": 1.0}})
    a, b = run(data), run(data)
    assert a.scale_events.equals(b.scale_events) and a.requests.equals(b.requests)


POLICIES = st.one_of(
    st.builds(lambda up, gap, cd, step, sig: {"type": "threshold", "params": {
        "signal": sig, "up": up, "down": up * gap, "cooldown_s": cd, "step": step}},
        st.floats(0.05, 5), st.floats(0, 0.95), st.floats(0, 3), st.integers(1, 4),
        st.sampled_from(["utilization", "kv_utilization", "queue_depth"])),
    st.builds(lambda t: {"type": "target-utilization", "params": {"target": t,
                                                                   "cooldown_s": 0}},
              st.floats(0.05, 1)),
    st.builds(lambda q: {"type": "queue-depth", "params": {"up_per_replica": q,
                                                            "cooldown_s": 0}},
              st.floats(0.1, 10)),
    st.just({"type": "kv-demand", "params": {"avg_input_tokens": 200000}}),
    st.just({"type": "oscillator"}),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=POLICIES, low=st.integers(1, 3), extra=st.integers(0, 3),
       start=st.integers(0, 3), rate=st.floats(2, 60), seed=st.integers(0, 1000),
       drain=st.sampled_from(["wait", "immediate", "redirect"]))
def test_replica_count_stays_within_bounds(policy, low, extra, start, rate, seed, drain):
    high = low + extra
    pool = {"min": low, "max": high, "initial": min(high, low + start)}
    data = scenario(policy, rate=rate, duration=5.0, pool=pool, interval=0.25, seed=seed,
                    actuation={"provisioning_s": {"type": "exponential", "mean": 0.3},
                               "drain": {"policy": drain}})
    result = run(Scenario.from_dict(data).to_dict(), checks=True)
    replicas = result.replicas
    assert replicas.replicas.between(low, high).all()
    events = result.scale_events
    assert events["to"].between(low, high).all() and events["from"].between(low, high).all()
    assert set(result.requests.final_state) <= TERMINAL


def test_recent_ttft_trigger_evaluates_between_polls():
    data = scenario({"type": "queue-depth", "params": {"up_per_replica": 1, "cooldown_s": 0}},
                    rate=60, interval=100.0, triggers={"recent_ttft_ms": 300, "min_gap_s": 0.5})
    events = run(data).scale_events
    assert len(events) and set(events.trigger) == {"recent_ttft"}


@pytest.mark.parametrize("takes_traffic", [True, False])
def test_the_replica_table_counts_warming_replicas_as_taking_traffic_only_if_they_do(
        takes_traffic):
    data = scenario(ALWAYS_UP, pool={"min": 1, "max": 2, "initial": 1}, interval=3.0,
                    actuation={"provisioning_s": {"type": "constant", "value": 0.5},
                               "warmup": {"duration_s": 1.0},
                               "warming_takes_traffic": takes_traffic})
    replicas = run(data).replicas
    growing = replicas[replicas.replicas == 2].iloc[0]
    assert growing.routable == 1  # provisioning: counted, not taking traffic
    assert replicas.routable.max() == 2
    first_two = replicas[replicas.routable == 2].time_s.iloc[0]
    assert first_two == pytest.approx(growing.time_s + (0.5 if takes_traffic else 1.5))


# --- signals that fit LLM SLOs, flapping, compressed days (issue 31 item 7) -----------------


def tpot_bound(policy: dict) -> dict:
    """vLLM's 256-slot batches, 60 req/s on one replica to start (max 6), TPOT target 15 ms:
    the batch absorbs the load, so nothing waits while every request's TPOT grows."""
    data = scenario(policy, rate=60.0, duration=60.0, pool={"min": 1, "max": 6, "initial": 1},
                    actuation={"provisioning_s": {"type": "constant", "value": 2},
                               "load_s": {"type": "constant", "value": 1}})
    data["engine"] = {"max_running_requests": 256, "kv_blocks": 20000}
    data["workload"]["tenants"][0]["slo"] = {"tpot_ms": 15}
    return data


def test_latency_and_token_signals_scale_where_the_queue_stays_empty():
    """Issue 31: the threshold template saw batch occupancy, KV use and queue depth only; with
    256-request batches the queue stays near 0 while TPOT misses grow. Following the recent
    TPOT or the tokens per replica keeps the SLO."""
    by_queue = run(tpot_bound({"type": "threshold", "params": {
        "signal": "queue_depth", "up": 4, "down": 0.5, "cooldown_s": 5}}))
    by_tpot = run(tpot_bound({"type": "threshold", "params": {
        "signal": "recent_tpot_ms", "up": 12, "down": 8, "cooldown_s": 5}}))
    by_tokens = run(tpot_bound({"type": "target-utilization", "params": {
        "signal": "token_rate", "target": 4000, "cooldown_s": 5}}))
    assert by_queue.metrics["queue_depth_avg"] < 0.1
    assert by_queue.metrics["slo_attainment"] < 0.8
    for better in (by_tpot, by_tokens):
        assert better.metrics["slo_attainment"] > by_queue.metrics["slo_attainment"] + 0.15
        assert better.summary["deployment"]["avg_replicas"] > \
            by_queue.summary["deployment"]["avg_replicas"]
    signals = by_tokens.scale_events.signals.iloc[0]
    assert "recent_tpot_ms=" in signals and "output_tokens_per_s=" in signals


def test_scale_oscillation_fires_on_56_up_56_down_in_300_s():
    """Issue 31: 56 scale-ups and 56 scale-downs in 300 s raised no scale_oscillation, because
    the window was the policy's cooldown, which the policy itself respects. Here each action
    comes 2.68 s after the last, just past a 2.5 s cooldown."""
    from blis_simpy.core.scale_log import ScaleEvent, ScaleLog
    from blis_simpy.metrics.anomalies import oscillations

    log = ScaleLog()
    log.windows["pool"] = (2_500_000 + 3 * 1_000_000, True)  # cooldown + 3 polls of 1 s
    for i in range(112):
        up = i % 2 == 0
        log.events.append(ScaleEvent(round(i * 300e6 / 112), "pool", "up" if up else "down",
                                     2 - up, 1 + up, "", "", "periodic"))
    [flap] = oscillations(log)
    assert flap.type == "scale_oscillation" and flap.severity == 1.0
    assert flap.detail.startswith("pool: 111 reversals in 297 s (56 up, 56 down)")
    log.events = log.events[:2]  # one spike followed, up then down: not flapping
    assert oscillations(log) == []


def test_a_flapping_threshold_policy_is_caught_in_a_run():
    """The library's diurnal day with a narrow hysteresis band and a 2 s cooldown: around the
    peak the pool swings between 1 and 6 replicas and back every half minute, each action
    after the cooldown."""
    result = run(with_policy("autoscale-diurnal", {
        "type": "threshold",
        "params": {"signal": "utilization", "up": 0.5, "down": 0.45, "cooldown_s": 2}}))
    deployment = result.summary["deployment"]
    assert deployment["scale_ups"] > 15 and deployment["scale_downs"] > 15
    flaps = result.anomalies[result.anomalies.type == "scale_oscillation"]
    assert len(flaps) >= 1 and flaps.duration_s.sum() > 60
    assert "Widen the autoscaler's hysteresis" in result.summary_text()


def with_policy(name: str, policy: dict) -> dict:
    import blis_simpy

    data = blis_simpy.load(name).to_dict()
    data["deployment"]["autoscaler"]["policy"] = policy
    data["deployment"]["autoscaler"]["interval_s"] = 1
    return data


def test_slo_attainment_by_hour_follows_a_compressed_day():
    """A diurnal profile of 300 s is a day: its hours are 12.5 s, so the attainment has 24
    buckets that follow the load, not one."""
    import blis_simpy

    deployment = blis_simpy.run("autoscale-diurnal").summary["deployment"]
    assert deployment["slo_attainment_hour_s"] == 12.5
    hours = deployment["slo_attainment_by_hour"]
    assert len(hours) == 24 and None not in hours  # every simulated hour had requests
    fixed = blis_simpy.run("autoscale-diurnal", overrides={
        "deployment.autoscaler": None}).summary["deployment"]["slo_attainment_by_hour"]
    assert min(fixed) < 0.5 < max(fixed)  # one replica: the peak hours suffer, not the night
    spike = blis_simpy.run("autoscale-spike").summary["deployment"]
    assert spike["slo_attainment_hour_s"] == 3600 and len(spike["slo_attainment_by_hour"]) == 1
