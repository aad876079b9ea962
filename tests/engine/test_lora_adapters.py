"""Issue 35 item 1, LoRA adapters: an instance's adapter slots (LRU eviction of slots no
running request holds), a miss charged to the step that loads it, a request waiting for a slot
while the others go on, the slots' invariants under hypothesis (never more resident than slots;
no request runs without its adapter resident), the tenants' Zipf-like adapter draws, the
lora-affinity scorer, the metrics and the scenario keys."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.lora import LoraConfig
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.ordering import Background
from blis_simpy.core.request import LoraView, RequestView, State
from blis_simpy.core.router_state import RouterState
from blis_simpy.engine.adapters import AdapterSlots
from blis_simpy.policies.scorers import LoraAffinity
from tests.conftest import BASE, merge
from tests.policies.helpers import snap

TENANT = {"prompt": {"type": "gaussian", "mean": 200, "stdev": 50, "min": 8, "max": 800},
          "output": {"type": "gaussian", "mean": 40, "stdev": 10, "min": 1, "max": 100}}


def slots(n: int, load_ms: float = 2.0) -> AdapterSlots:
    return AdapterSlots("i0", LoraConfig(slots=n, load_ms=load_ms, load_ms_per_rank=0.0), {},
                        [], {})


def lora_data(slots_: int = 2, count: int = 6, instances: int = 2, rate: float = 30,
              duration: float = 2.0, routing: dict[str, Any] | None = None,
              **lora: Any) -> dict[str, Any]:
    return {**{k: v for k, v in BASE.items() if k != "workload"},
            "engine": {"kv_blocks": 4000, "lora": {"slots": slots_, **lora}},
            "cluster": {"instances": instances},
            "policies": {"routing": routing or {"type": "round-robin"}},
            "workload": {"type": "tenants", "rate_per_s": rate, "duration_s": duration,
                         "tenants": [{"id": "t", "adapters": {"count": count}, **TENANT}]}}


# -- the slots ----------------------------------------------------------------------------------

def test_a_miss_loads_into_a_free_slot_and_a_hit_costs_nothing():
    s = slots(2)
    assert s.hold("a", 0) == 2000 and s.hold("b", 0) == 2000
    assert s.hold("a", 5) == 0
    assert s.loads == [(0, "i0", "a", ""), (0, "i0", "b", "")] and s.hits == {"a": 1}


def test_the_least_recently_admitted_slot_no_request_holds_is_evicted():
    s = slots(2)
    s.hold("a", 0)
    s.hold("b", 1)
    s.hold("a", 2)  # a is now the most recent
    s.release("a")
    s.release("a")
    s.release("b")
    s.hold("c", 3)
    assert list(s.resident) == ["a", "c"] and s.loads[-1] == (3, "i0", "c", "b")


def test_a_held_slot_is_never_evicted_and_a_full_set_refuses():
    s = slots(1)
    s.hold("a", 0)
    assert not s.can_take("b") and s.can_take("a")
    s.release("a")
    assert s.can_take("b")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=60))
def test_slots_never_exceed_capacity_and_holds_add_up(n, ops):
    s = slots(n)
    held: Counter[str] = Counter()
    for admit, k in ops:
        name = f"a{k}"
        if admit and s.can_take(name):
            s.hold(name, 0)
            held[name] += 1
        elif not admit and held[name]:
            s.release(name)
            held[name] -= 1
        assert len(s.resident) <= n
        assert all(s.resident.get(a, 0) == c for a, c in held.items() if c)
        assert all(a in s.resident for a, c in held.items() if c)
        assert s.holders() == sum(held.values())


# -- whole runs ---------------------------------------------------------------------------------

def watched(data: dict[str, Any], every_us: int = 2000) -> tuple[Any, list[str]]:
    """Run with a process that checks every instance's slots every `every_us`: never more
    resident than slots, and every running request's adapter resident, held once per runner."""
    sim = blis_simpy.prepare(data)
    broken: list[str] = []
    capacity = sim.scenario.engine.lora.slots

    def watch():
        while sim.work_left():
            for inst in sim.fleet:
                slots_ = inst.adapters
                if len(slots_.resident) > capacity:
                    broken.append(f"{inst.id}: {len(slots_.resident)} resident")
                running = Counter(r.adapter for r in inst.running if r.adapter)
                for adapter, n in running.items():
                    if slots_.resident.get(adapter) != n:
                        broken.append(f"{inst.id}: {adapter} runs {n}x, held "
                                      f"{slots_.resident.get(adapter)}")
            yield Background(sim.env, every_us)

    sim.env.process(watch())
    result = blis_simpy.simulate(sim)
    return result, broken


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 8), st.integers(1, 3), st.sampled_from(
    [{"type": "round-robin"}, {"type": "least-loaded"},
     {"type": "weighted", "params": {"scorers": {"lora-affinity": 2, "queue-depth": 1}}}]),
    st.integers(0, 5))
def test_no_request_runs_without_its_adapter_and_slots_stay_bounded(n, count, instances,
                                                                    routing, seed):
    data = lora_data(n, count, instances, rate=40, duration=1.0, routing=routing,
                     load_ms=3.0)
    data["seed"] = seed
    data["engine"]["max_running_requests"] = 8
    result, broken = watched(data)
    assert not broken, broken[:5]
    table = result.requests
    assert (table["final_state"] == "completed").all()
    loads = result.summary["adapters"]
    assert loads["loads"] >= loads["adapters"]  # every adapter used was loaded at least once


def test_a_miss_adds_the_load_time_to_the_step_that_admits_it():
    base = lora_data(1, 1, 1, rate=1, duration=1.0)
    base["workload"]["max_requests"] = 1
    cold = blis_simpy.run(merge(base, {"engine": {"lora": {"load_ms": 0.0,
                                                           "load_ms_per_rank": 0.0}}}))
    slow = blis_simpy.run(merge(base, {"engine": {"lora": {"load_ms": 50.0,
                                                           "load_ms_per_rank": 0.0}}}))
    gap = slow.requests["ttft_ms"].iloc[0] - cold.requests["ttft_ms"].iloc[0]
    assert gap == pytest.approx(50.0, abs=1e-6)
    assert slow.summary["adapters"]["loads"] == 1


def test_a_request_waits_for_a_slot_while_requests_behind_it_go_on():
    """One slot held by a's long requests: b waits until they finish; a's later requests
    (resident) are admitted meanwhile."""
    from blis_simpy.core.request import Request

    sim = blis_simpy.prepare(merge(lora_data(1, 1, 1, rate=1, duration=0.001),
                                   {"workload": {"max_requests": 1}}))
    inst = next(iter(sim.fleet))
    reqs = []
    for i, adapter in enumerate(["a", "b", "a"]):
        req = Request(100 + i, 0, np.arange(64), np.arange(30 if i == 0 else 5))
        req.adapter = adapter
        reqs.append(req)
    for req in reqs:
        inst.accept(req)
    sim.env.run()
    first, b, later = reqs
    assert all(r.state is State.COMPLETED for r in reqs)
    assert later.first_scheduled < first.completed_at  # a resident: admitted at once
    # its slot was held until the step that finished a's last request ended (its tokens reach
    # the client an output delay later)
    assert b.first_scheduled >= first.completed_at - inst.latency.output_delay
    assert b.first_scheduled > later.completed_at - inst.latency.output_delay


def test_a_failed_instance_loses_its_adapters():
    s = slots(2)
    s.hold("a", 0)
    s.wipe()
    assert not s.resident and s.can_take("z")


# -- workload -----------------------------------------------------------------------------------

def test_tenants_draw_adapters_by_zipf_popularity_and_their_own_stream():
    data = lora_data(4, 5, 1, rate=200, duration=2.0)
    data["workload"]["tenants"][0]["adapters"] = {"count": 5, "zipf": 1.0, "fraction": 0.75}
    table = blis_simpy.run(data).requests
    counts = Counter(table["adapter"])
    base_share = counts.pop("") / len(table)
    assert 0.18 < base_share < 0.32
    ranked = [counts[f"t-lora-{k}"] for k in range(5)]
    assert ranked[0] > ranked[1] > ranked[4] > 0
    assert ranked[0] / ranked[4] == pytest.approx(5, rel=0.35)  # weights 1/(k+1)
    # the adapters are drawn from their own stream: arrivals and lengths are those of the
    # same tenant without adapters
    plain = merge(data, {})
    del plain["engine"]["lora"]
    del plain["workload"]["tenants"][0]["adapters"]
    other = blis_simpy.run(plain).requests
    assert list(other["arrival_s"]) == list(table["arrival_s"])
    assert list(other["input_tokens"]) == list(table["input_tokens"])


# -- the scorer -----------------------------------------------------------------------------------

class Held:
    def __init__(self, where: dict[str, set[str]]) -> None:
        self.where = where

    def holds_adapter(self, instance_id: str, adapter: str) -> bool:
        return adapter in self.where.get(instance_id, set())


def affinity(adapter: str, where: dict[str, set[str]]) -> list[float]:
    state = RouterState()
    state.adapter_signal = Held(where)
    view = (LoraView("r", 0, 10, "t", "", (), adapter) if adapter
            else RequestView("r", 0, 10, "t", "", ()))
    return LoraAffinity().scores(view, [snap(i) for i in range(3)], state)


def test_lora_affinity_prefers_instances_holding_the_adapter_and_is_neutral_otherwise():
    assert affinity("a", {"instance_1": {"a"}}) == [0.0, 1.0, 0.0]
    assert affinity("a", {}) == [1.0, 1.0, 1.0]  # cold everywhere
    assert affinity("a", {f"instance_{i}": {"a"} for i in range(3)}) == [1.0, 1.0, 1.0]
    assert affinity("", {"instance_1": {"a"}}) == [1.0, 1.0, 1.0]  # the base model


def test_bdd_lora_affinity_lowers_adapter_misses_against_round_robin():
    affine = blis_simpy.run("lora-affinity")
    spread = blis_simpy.run("lora-affinity", overrides={"policies.routing":
                                                       {"type": "round-robin"}})
    a, r = affine.summary["adapters"], spread.summary["adapters"]
    assert a["requests"] == r["requests"] > 500
    assert a["loads"] * 3 < r["loads"], (a["loads"], r["loads"])
    assert a["ttft_mean_ms"] < r["ttft_mean_ms"]


# -- outputs and keys ---------------------------------------------------------------------------

def test_adapter_metrics_tables_and_columns_only_with_engine_lora(tmp_path):
    result = blis_simpy.run(lora_data())
    section = result.summary["adapters"]
    per = section["per_adapter"]
    assert sum(v["requests"] for v in per.values()) == section["requests"]
    assert sum(v["loads"] for v in per.values()) == section["loads"] == len(
        result.adapter_loads)
    assert sum(v["evictions"] for v in per.values()) == section["evictions"]
    assert 0 < section["miss_rate"] <= 1
    result.save(tmp_path / "on")
    assert (tmp_path / "on" / "adapter_loads.csv").exists()
    plain = blis_simpy.run(merge(BASE, {"workload": {"num_requests": 5}}))
    assert "adapters" not in plain.summary and plain.adapter_loads is None
    assert "adapter" not in plain.requests.columns
    assert "lora" not in plain.scenario.to_dict()["engine"]


@pytest.mark.parametrize(("change", "path"), [
    ({"engine": {"lora": {"slots": 0}}}, "engine.lora.slots"),
    ({"engine": {"lora": {"slots": 2, "load_ms": -1}}}, "engine.lora.load_ms"),
    ({"engine": {"lora": {"slots": 2, "colour": 1}}}, "engine.lora.colour"),
    ({"workload": {"tenants": [{"id": "t", "adapters": {"count": 0}}]}},
     "workload.tenants[0].adapters.count"),
    ({"workload": {"tenants": [{"id": "t", "adapters": {"count": 2, "zipf": -1}}]}},
     "workload.tenants[0].adapters.zipf"),
    ({"workload": {"tenants": [{"id": "t", "adapters": {"count": 2, "fraction": 2}}]}},
     "workload.tenants[0].adapters.fraction"),
    ({"compat": "blis"}, "engine.lora"),
])
def test_bad_lora_keys_fail_before_the_run_naming_the_key(change, path):
    with pytest.raises(ScenarioError) as err:
        blis_simpy.prepare(merge(lora_data(), change))
    assert err.value.path == path, str(err.value)


def test_tenants_naming_adapters_need_engine_lora():
    data = lora_data()
    del data["engine"]["lora"]
    with pytest.raises(ScenarioError) as err:
        blis_simpy.prepare(data)
    assert err.value.path == "workload.tenants[0].adapters"


def test_a_bad_lora_key_exits_2_naming_it(tmp_path):
    from typer.testing import CliRunner

    from blis_simpy.cli import app
    from blis_simpy.core.yamlio import dump_yaml

    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml(merge(lora_data(), {"engine": {"lora": {"slots": -3}}})))
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert out.exit_code == 2 and "engine.lora.slots" in out.output
    assert "Traceback" not in out.output
