"""Issue 35 item 2, gateway flow control: the bands' rules on their own (capacities, shedding,
dispatch order, fairness, per-band ceilings), their bookkeeping under hypothesis, and the
queue in whole runs (a Store drained by a dispatch process; client timeouts and the queue's
TTL take requests out of it; a run without it is the run it was)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.cluster.flow import QUEUED, Bands
from blis_simpy.config.flow_control import FlowControlConfig
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import RejectCode, Request
from blis_simpy.core.schema import load
from tests.conftest import BASE, merge, scenario

CLASSES = ["critical", "standard", "batch", "sheddable", "background", "other"]


def config(**fields) -> FlowControlConfig:
    return load(FlowControlConfig, fields, "cluster.flow_control")


def req(index: int, slo: str = "standard", tenant: str = "") -> Request:
    return Request(index, 0, np.arange(4), np.arange(2), tenant, slo)


def fill(bands: Bands, *specs: tuple[str, str]) -> list[Request]:
    made = []
    for i, (slo, tenant) in enumerate(specs):
        r = req(i, slo, tenant)
        assert bands.add(r, 0) == (QUEUED, None)
        made.append(r)
    return made


def drain(bands: Bands, saturation: float = 0.0) -> list[str]:
    out = []
    while (r := bands.pop(saturation)) is not None:
        out.append(r.name)
    return out


# -- capacities and shedding ----------------------------------------------------------------

def test_a_full_band_refuses_its_newcomer_and_other_bands_still_queue():
    bands = Bands(config(band_capacity=1, band_capacities={"batch": 2}))
    fill(bands, ("critical", ""), ("batch", ""), ("batch", ""))
    assert bands.add(req(9, "critical"), 0) == (RejectCode.BAND_FULL, None)
    assert bands.add(req(10, "batch"), 0) == (RejectCode.BAND_FULL, None)
    assert bands.add(req(11, "standard"), 0)[0] == QUEUED
    assert bands.depth() == {4: 1, 3: 1, -1: 2, -2: 0, -3: 0}


def test_a_full_queue_rejects_the_newcomer_by_default():
    bands = Bands(config(max_queue_depth=2))
    fill(bands, ("background", ""), ("batch", ""))
    assert bands.add(req(5, "critical"), 0) == (RejectCode.QUEUE_FULL, None)
    assert bands.size == 2


def test_shed_lowest_pushes_out_the_newest_of_the_lowest_sheddable_band():
    bands = Bands(config(max_queue_depth=4, on_full="shed-lowest"))
    old_bg, new_bg, _, _ = fill(bands, ("background", "a"), ("background", "b"),
                                ("batch", ""), ("critical", ""))
    outcome, victim = bands.add(req(7, "standard"), 0)
    assert outcome == QUEUED and victim is new_bg
    outcome, victim = bands.add(req(8, "standard"), 0)
    assert victim is old_bg
    outcome, victim = bands.add(req(9, "critical"), 0)
    assert victim is not None and victim.slo_class == "batch"
    # nothing sheddable left below a critical newcomer: it is refused
    assert bands.add(req(10, "critical"), 0) == (RejectCode.QUEUE_FULL, None)
    assert bands.size == 4


def test_shed_lowest_never_pushes_out_a_request_of_the_newcomers_band_or_above():
    bands = Bands(config(max_queue_depth=2, on_full="shed-lowest"))
    fill(bands, ("batch", ""), ("sheddable", ""))
    assert bands.add(req(5, "sheddable"), 0) == (RejectCode.QUEUE_FULL, None)
    assert bands.add(req(6, "background"), 0) == (RejectCode.QUEUE_FULL, None)
    _, victim = bands.add(req(7, "batch"), 0)
    assert victim is not None and victim.slo_class == "sheddable"


# -- dispatch order, fairness, ceilings -----------------------------------------------------

def test_priority_order_serves_the_highest_band_first_fifo_the_earliest_arrival():
    specs = [("batch", ""), ("critical", ""), ("standard", ""), ("critical", "")]
    for order, expected in (("priority", [1, 3, 2, 0]), ("fifo", [0, 1, 2, 3])):
        bands = Bands(config(dispatch_order=order))
        fill(bands, *specs)
        assert drain(bands) == [f"request_{i}" for i in expected]


def test_slo_deadline_order_serves_the_earliest_ttft_deadline_within_a_flow():
    targets = {"a": 1000, "b": 100}
    bands = Bands(config(dispatch_order="slo-deadline"),
                  deadline=lambda r: targets.get(r.tenant_id, 10**9))
    slow, fast = req(0, tenant="a"), req(1, tenant="a")
    fast.tenant_id = "a"
    bands.add(slow, 0)  # deadline 1000
    bands.add(fast, 950)  # deadline 1950
    urgent = req(2, tenant="a")
    bands.add(urgent, 0)  # deadline 1000, later in line than slow
    assert drain(bands) == ["request_0", "request_2", "request_1"]


def test_global_strict_fairness_takes_the_earliest_head_round_robin_takes_turns():
    specs = [("standard", "a"), ("standard", "a"), ("standard", "a"), ("standard", "b"),
             ("standard", "c")]
    strict = Bands(config(fairness="global-strict"))
    fill(strict, *specs)
    assert drain(strict) == [f"request_{i}" for i in (0, 1, 2, 3, 4)]
    turns = Bands(config(fairness="round-robin"))
    fill(turns, *specs)
    assert drain(turns) == [f"request_{i}" for i in (0, 3, 4, 1, 2)]


def test_saturation_holds_every_band_and_usage_limit_closes_low_bands_first():
    bands = Bands(config(usage_limit=0.5))  # five bands: ceilings 1, .875, .75, .625, .5
    assert [b.ceiling for b in bands.bands] == [1.0, 0.875, 0.75, 0.625, 0.5]
    fill(bands, ("background", ""), ("critical", ""))
    assert bands.pop(1.0) is None
    assert bands.pop(0.6) .slo_class == "critical"
    assert bands.pop(0.6) is None  # background closes at 0.5
    assert bands.pop(0.49).slo_class == "background"


def test_a_closed_band_closes_every_band_below_it_even_when_empty():
    bands = Bands(config(usage_limit=0.5, dispatch_order="fifo"))
    fill(bands, ("background", ""))
    assert bands.pop(0.7) is None  # standard's band (.875) open, batch's (.75) open ...
    assert bands.pop(0.55) is None  # ... sheddable's (.625) open, background's (.5) closed
    assert bands.pop(0.5) is None
    assert bands.pop(0.4) is not None


# -- bookkeeping under hypothesis -----------------------------------------------------------

ops = st.lists(st.tuples(st.sampled_from(["add", "add", "pop", "remove"]),
                         st.sampled_from(CLASSES), st.sampled_from(["", "a", "b"]),
                         st.floats(0, 1.2), st.integers(0, 50)), max_size=80)
configs = st.builds(
    lambda depth, cap, batch, on_full, order, fair, limit: config(
        max_queue_depth=depth, band_capacity=cap, band_capacities={"batch": batch},
        on_full=on_full, dispatch_order=order, fairness=fair, usage_limit=limit),
    st.integers(0, 6), st.integers(0, 4), st.integers(0, 3),
    st.sampled_from(["reject", "shed-lowest"]), st.sampled_from(["priority", "fifo",
                                                                  "slo-deadline"]),
    st.sampled_from(["global-strict", "round-robin"]), st.sampled_from([1.0, 0.7, 0.2]))


@settings(max_examples=300, deadline=None)
@given(cfg=configs, steps=ops)
def test_the_bands_hold_every_request_once_within_their_capacities(cfg, steps):
    bands = Bands(cfg, deadline=lambda r: 1000 * (len(r.tenant_id) + 1))
    inside: set[Request] = set()
    made = []
    for n, (op, slo, tenant, saturation, pick) in enumerate(steps):
        if op == "add":
            r = req(n, slo, tenant)
            made.append(r)
            outcome, victim = bands.add(r, n)
            if victim is not None:
                assert victim in inside and victim.slo_class != slo
                assert bands.priorities.of(victim.slo_class) < min(0, bands.priorities.of(slo))
                inside.discard(victim)
            if outcome == QUEUED:
                inside.add(r)
            else:
                assert victim is None
        elif op == "pop":
            got = bands.pop(saturation)
            if got is not None:
                assert got in inside
                band = bands.by_priority[bands.priorities.of(got.slo_class)]
                assert saturation < band.ceiling
                if cfg.dispatch_order != "fifo":  # no higher band was passed over
                    assert all(b.size == 0 for b in bands.bands if b.priority > band.priority)
                inside.discard(got)
        elif made:
            r = made[pick % len(made)]
            assert bands.remove(r) == (r in inside)
            inside.discard(r)
        # every request in exactly one flow, the counts agree, the limits hold
        assert bands.size == len(inside) == sum(b.size for b in bands.bands)
        held = [e.req for b in bands.bands for f in b.flows.values() for e in f]
        assert sorted(r.index for r in held) == sorted(r.index for r in inside)
        assert all(f for b in bands.bands for f in b.flows.values())  # no empty flow kept
        if cfg.max_queue_depth:
            assert bands.size <= cfg.max_queue_depth
        for b in bands.bands:
            assert not b.limit or b.size <= b.limit
    assert sorted(drain(bands)) == sorted(r.name for r in inside)


# -- the scenario section -------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "path"), [
    ({"max_queue_depth": -1}, "cluster.flow_control.max_queue_depth"),
    ({"band_capacities": {"batch": -2}}, "cluster.flow_control.band_capacities.batch"),
    ({"band_capacities": {"batch": 2, "odd": 3}, "priorities": {"odd": -1}},
     "cluster.flow_control.band_capacities.odd"),
    ({"priorities": {"gold": 1000}}, "cluster.flow_control.priorities.gold"),
    ({"priorities": {"gold": "high"}}, "cluster.flow_control.priorities.gold"),
    ({"dispatch_order": "lifo"}, "cluster.flow_control.dispatch_order"),
    ({"fairness": "random"}, "cluster.flow_control.fairness"),
    ({"usage_limit": 0}, "cluster.flow_control.usage_limit"),
    ({"usage_limit": 1.5}, "cluster.flow_control.usage_limit"),
    ({"on_full": "drop"}, "cluster.flow_control.on_full"),
    ({"saturation": {"type": "utilization", "kv_utilization": 2}},
     "cluster.flow_control.saturation.kv_utilization"),
    ({"saturation": {"type": "concurrency", "max_in_flight": 0}},
     "cluster.flow_control.saturation.max_in_flight"),
    ({"saturation": {"type": "psychic"}}, "cluster.flow_control.saturation.type"),
    ({"queue_ttl_s": 0}, "cluster.flow_control.queue_ttl_s"),
    ({"dispatch_tick_s": -1}, "cluster.flow_control.dispatch_tick_s"),
    ({"depth": 5}, "cluster.flow_control.depth"),
])
def test_bad_flow_control_settings_name_their_key(fields, path):
    with pytest.raises(ScenarioError) as err:
        scenario(cluster={"flow_control": fields})
    assert err.value.path == path


def test_compat_mode_refuses_a_gateway_queue():
    with pytest.raises(ScenarioError) as err:
        scenario(compat="blis", workload={"arrival": "constant"}, cluster={"flow_control": {}})
    assert err.value.path == "cluster.flow_control"


def test_no_flow_control_section_is_left_out_of_the_written_scenario():
    assert "flow_control" not in scenario().to_dict()["cluster"]
    assert scenario(cluster={"flow_control": {}}).to_dict()["cluster"]["flow_control"][
        "dispatch_order"] == "priority"


# -- whole runs -----------------------------------------------------------------------------

TWO_CLASSES = {
    "type": "tenants", "rate_per_s": 150, "duration_s": 8,
    "tenants": [
        {"id": "chat", "rate_fraction": 0.5, "slo_class": "critical",
         "prompt": {"type": "constant", "value": 512}, "output": {"type": "constant",
                                                                   "value": 150}},
        {"id": "jobs", "rate_fraction": 0.5, "slo_class": "batch",
         "prompt": {"type": "constant", "value": 1024}, "output": {"type": "constant",
                                                                    "value": 300}}]}


def two_classes(workload=TWO_CLASSES, **cluster) -> Scenario:
    return Scenario.from_dict({**merge(BASE, {"cluster": {"instances": 2, **cluster}}),
                               "workload": workload})


def overloaded(**flow):
    return blis_simpy.run(two_classes(**flow))


def test_without_flow_control_the_run_is_routed_at_once():
    df = overloaded().requests
    assert (df.routed_s == df.admitted_s).all()
    assert "gateway_queue" not in overloaded().summary


def test_bdd_the_queue_holds_requests_while_the_fleet_is_saturated_high_band_first():
    # Given an overloaded fleet behind a gateway queue with priority bands
    result = overloaded(flow_control={"max_queue_depth": 100})
    df = result.requests
    wait = (df.routed_s - df.admitted_s) * 1000
    # Then requests wait at the gateway, the batch band far longer than the critical one
    by_class = wait.groupby(df.slo_class).mean()
    assert by_class["batch"] > 10 * by_class["critical"] > 0
    # And every request ends once: completed, refused by the queue, or unfinished
    assert set(df.final_state) <= {"completed", "rejected", "queued", "running", "arriving"}
    queue = result.summary["gateway_queue"]
    assert queue["bands"]["4"]["classes"] == ["critical"]
    assert queue["bands"]["-1"]["peak_depth"] <= 100
    refused = (df.reject_code == RejectCode.QUEUE_FULL).sum()
    assert refused == queue["refused"].get("gateway_queue_full", 0) > 0


def test_a_client_timeout_takes_a_request_out_of_the_queue():
    chat, jobs = TWO_CLASSES["tenants"]
    workload = {**TWO_CLASSES, "tenants": [chat, {**jobs, "timeout_s": 0.3}]}
    result = blis_simpy.run(two_classes(workload, flow_control={}))
    df = result.requests
    gave_up = df[(df.final_state == "timed_out") & df.routed_s.isna()]
    assert len(gave_up) > 0  # left the queue without ever being routed
    assert result.summary["gateway_queue"]["bands"]["-1"]["queued"] >= len(gave_up)


def test_the_queue_ttl_drops_requests_that_waited_too_long():
    df = overloaded(flow_control={"queue_ttl_s": 0.25}).requests
    expired = df[df.reject_code == RejectCode.QUEUE_TTL]
    by_class = expired.slo_class.value_counts()
    assert by_class["batch"] > by_class.get("critical", 0) > 0
    routed = df.dropna(subset=["routed_s"])
    assert ((routed.routed_s - routed.admitted_s) <= 0.25 + 1e-9).all()


def test_library_scenario_shedding_keeps_the_critical_bands_slo_under_overload():
    queued = blis_simpy.run("flow-control-shedding")
    direct = blis_simpy.run("flow-control-shedding", overrides={"cluster.flow_control": None})
    critical = queued.metrics["per_slo_class"]["critical"]
    assert critical["completion_rate"] == 1.0 and critical["slo_attainment"] > 0.98
    assert critical["ttft_p99_ms"] < 500
    assert direct.metrics["per_slo_class"]["critical"]["slo_attainment"] < 0.5
    # the batch band paid for it: shed from a full queue, and waiting
    bands = queued.summary["gateway_queue"]["bands"]
    assert bands["-1"]["refused"]["gateway_queue_shed"] > 0
    assert bands["-1"]["wait_mean_ms"] > 20 * bands["4"]["wait_mean_ms"]


def test_the_command_line_names_a_bad_flow_control_key_and_exits_2(tmp_path):
    from typer.testing import CliRunner

    from blis_simpy.cli import app

    result = CliRunner().invoke(app, ["run", "flow-control-shedding", "--out",
                                      str(tmp_path / "out"), "--set",
                                      "cluster.flow_control.fairness=random"])
    assert result.exit_code == 2
    assert "cluster.flow_control.fairness" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_queue_behind_a_fleet_that_failed_for_good_lets_its_requests_fail_and_the_run_end():
    """Every instance crashes, never repaired: nothing held in the queue can ever be routed,
    so it is dispatched to the gateway's failure rule (the retries, then `failed`) instead of
    being held, and ticked, for ever (the run never ended; found by the fault invariants)."""
    data = two_classes(flow_control={}).to_dict()
    data["compat"] = "none"
    data["workload"]["duration_s"] = 2
    data["faults"] = {"crashes": [{"at_s": 0.5, "instances": ["instance_0", "instance_1"],
                                   "repair_s": None}],
                      "requests": {"on_failure": "retry", "max_retries": 2, "backoff_s": 0.01}}
    df = blis_simpy.run(Scenario.from_dict(data)).requests
    assert set(df.final_state) <= {"completed", "rejected", "failed"}
    late = df[df.arrival_s > 0.5]
    assert len(late) > 0 and (late.final_state == "failed").all()
