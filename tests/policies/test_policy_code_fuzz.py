"""User policy code that misbehaves (robustness defect 3), generated: every axis, every way of
raising or returning garbage, at a random call. The run must stop with a PolicyError naming the
policy's place, its class, the call and the request; through the CLI, exit 2 with that one line
and nothing written."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.api import prepare
from blis_simpy.core.errors import PolicyError, ScenarioError
from blis_simpy.policies.admission import ADMIT, AdmissionDecision, AdmissionPolicy
from blis_simpy.policies.guard import MAX_BREAKDOWN, MAX_KEY_ITEMS
from blis_simpy.policies.priority import PriorityPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.policies.scheduler import InstanceScheduler
from tests.conftest import BASE, merge, scenario

_modules = itertools.count()

# A burst on a small KV pool: queues form (order_key is used) and running requests are
# preempted (victim is called).
PRESSURE: dict[str, Any] = {
    "engine": {"kv_blocks": 120},
    "workload": {"num_requests": 24, "rate_per_s": 400,
                 "prompt": {"mean": 300, "stdev": 0, "min": 300, "max": 300},
                 "output": {"mean": 150, "stdev": 0, "min": 150, "max": 150}},
}

EXCEPTIONS = (ValueError, KeyError, ZeroDivisionError, RuntimeError, TypeError, IndexError,
              AttributeError, AssertionError, NotImplementedError, OverflowError)

GARBAGE: list[Any] = [None, "instance_0", 3, 2.5, True, [], {}, math.nan, math.inf, -math.inf,
                      object(), ("a", None), 10**400]  # the last: an int no float can hold


def bad_return(axis: str, kind: str, value: Any) -> Any:
    """A result that the guard must refuse on `axis`."""
    if kind == "garbage":
        return value
    if axis == "admission":
        return AdmissionDecision("delay", "later", delay_us=0) if kind == "out-of-range" \
            else AdmissionDecision("maybe")  # type: ignore[arg-type]
    if axis == "routing":
        if kind == "mixed":  # scores fine, the breakdown one short
            return RoutingDecision("instance_0", "", (1.0, 0.0), {"queue-depth": (1.0,)})
        return RoutingDecision("instance_99", "nowhere", (1.0,)) if kind == "out-of-range" \
            else RoutingDecision("instance_0", "bad scores", (math.nan,))
    if axis == "priority":
        return math.nan if kind == "out-of-range" else "high"
    if axis == "order_key":
        if kind == "mixed":  # a string where the earlier keys were numbers: they cannot sort
            return "late"
        return math.nan if kind == "out-of-range" else (1, None)
    return 10_000 if kind == "out-of-range" else -1  # victim position


def misbehaving(axis: str, method: str, after: int, failure: Any) -> type:
    """A user class of `axis` whose `method` works `after` times, then fails as `failure`
    (an exception type to raise, or a value to return)."""
    calls = itertools.count()

    def fail_or(good: Any) -> Any:
        if next(calls) < after:
            return good
        if isinstance(failure, type) and issubclass(failure, BaseException):
            raise failure("user bug")
        return failure

    if axis == "admission":
        return type("Gate", (AdmissionPolicy,), {
            "decide": lambda self, req, state, clock: fail_or(ADMIT)})
    if axis == "priority":
        return type("Rank", (PriorityPolicy,), {
            "compute": lambda self, req, state, clock: fail_or(float(req.arrival_us))})
    if axis == "routing":
        def route(self, req, priority, snapshots, state, clock):
            scores = tuple(1.0 if i == 0 else 0.0 for i in range(len(snapshots)))
            return fail_or(RoutingDecision(snapshots[0].id, "first", scores))
        return type("Router", (RoutingPolicy,), {"route": route})
    if method == "order_key":
        return type("Sched", (InstanceScheduler,), {
            "order_key": staticmethod(lambda view, priority: fail_or(view.arrival_us))})
    return type("Sched", (InstanceScheduler,), {
        "victim": lambda self, candidates, priorities: fail_or(len(candidates) - 1)})


def install(cls: type) -> str:
    """Put `cls` in a fresh importable module; its `module:Class` name."""
    name = f"fuzz_user_policies_{next(_modules)}"
    module = types.ModuleType(name)
    setattr(module, cls.__name__, cls)
    sys.modules[name] = module
    return f"{name}:{cls.__name__}"


AXES = {"admission": ["decide"], "priority": ["compute"], "routing": ["route"],
        "scheduler": ["order_key", "victim"]}


@st.composite
def failures(draw: st.DrawFn) -> tuple[str, str, int, Any]:
    axis = draw(st.sampled_from(sorted(AXES)))
    method = draw(st.sampled_from(AXES[axis]))
    kinds = ["raise", "garbage", "out-of-range", "wrong-shape"]
    if method in ("route", "order_key"):
        kinds.append("mixed")  # valid alone, wrong with the others (needs a good call first)
    kind = draw(st.sampled_from(kinds))
    after = draw(st.integers(1 if kind == "mixed" else 0, 6))
    if kind == "raise":
        failure: Any = draw(st.sampled_from(EXCEPTIONS))
    else:
        garbage = draw(st.sampled_from([g for g in GARBAGE if not valid(method, g)]))
        failure = bad_return(method if axis == "scheduler" else axis, kind, garbage)
    return axis, method, after, failure


def valid(method: str, value: Any) -> bool:
    """Garbage that happens to be a valid answer of `method` (a number is a priority...)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    finite = number and fits_a_float(value)
    if method == "compute":
        return finite
    if method == "order_key":
        return finite or isinstance(value, str)
    return method == "victim" and number and isinstance(value, int)


def fits_a_float(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # 10**400
        return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(failures())
def test_misbehaving_user_policy_names_policy_call_and_request(case):
    axis, method, after, failure = case
    type_name = install(misbehaving(axis, method, after, failure))
    sc = scenario(**merge(PRESSURE, {"cluster": {"instances": 2},
                                     "policies": {axis: {"type": type_name}}}))
    with pytest.raises(PolicyError) as err:
        blis_simpy.run(sc)
    text = str(err.value)
    assert err.value.path == f"policies.{axis}"
    assert f"{type_name}.{method}" in text
    assert "for request request_" in text
    assert ("raised" in text) if isinstance(failure, type) else ("returned" in text)


def run_with(axis: str, cls: type, instances: int = 1) -> str:
    """Run the pressure scenario with `cls` on `axis`; the PolicyError's text."""
    type_name = install(cls)
    with pytest.raises(PolicyError) as err:
        blis_simpy.run(scenario(**merge(PRESSURE, {
            "cluster": {"instances": instances, "trace_level": "decisions"},
            "policies": {axis: {"type": type_name}}})))
    assert err.value.path == f"policies.{axis}"
    return str(err.value)


def test_user_priority_beyond_the_float_range_is_a_policy_error():
    """An int no float can hold used to escape the guard as an OverflowError traceback."""
    cls = type("Huge", (PriorityPolicy,), {"compute": lambda self, req, state, clock: 10**400})
    assert "Huge.compute for request request_0 returned 1000" in run_with("priority", cls)


def test_user_sort_keys_that_do_not_compare_are_a_policy_error():
    """Numbers for some requests and strings for others: each key alone is fine, but the
    queue sort used to fail inside the instance with a TypeError traceback."""
    def key(view, priority):
        return view.id if view.id.endswith(("1", "3", "5", "7", "9")) else view.arrival_us

    cls = type("Mixed", (InstanceScheduler,), {"order_key": staticmethod(key)})
    text = run_with("scheduler", cls)
    assert "Mixed.order_key for request request_" in text
    assert "compare with the earlier ones" in text


def test_user_sort_keys_of_different_lengths_that_compare_are_accepted():
    """Tuples compare item by item: (1,) and (1, "x") are fine together."""
    def key(view, priority):
        return (0,) if view.id.endswith("0") else (0, view.id)

    cls = type("Ragged", (InstanceScheduler,), {"order_key": staticmethod(key)})
    result = blis_simpy.run(scenario(**merge(PRESSURE, {
        "policies": {"scheduler": {"type": install(cls)}}})))
    assert result.summary["completed_requests"] == 24


def test_user_routing_breakdown_of_the_wrong_length_is_a_policy_error():
    """Recorded decisions index the breakdown per instance: a short one used to fail in the
    gateway with an IndexError traceback."""
    def route(self, req, priority, snapshots, state, clock):
        return RoutingDecision(snapshots[0].id, "", (1.0, 0.0), {"queue-depth": (1.0,)})

    cls = type("Short", (RoutingPolicy,), {"route": route})
    assert "characters) -> 2 finite numbers, one per snapshot" in run_with("routing", cls, 2)


def test_user_routing_breakdown_is_bounded_like_the_hints():
    """Traced decisions keep their breakdown: 30,000 scorer names per decision held 8.5 MiB
    of the evaluator's memory each (newcomer 20 #4)."""
    def route(self, req, priority, snapshots, state, clock):
        scores = (1.0, 0.0)
        return RoutingDecision(snapshots[0].id, "", scores,
                               {f"s{i}": scores for i in range(MAX_BREAKDOWN + 1)})

    def long_name(self, req, priority, snapshots, state, clock):
        return RoutingDecision(snapshots[0].id, "", (1.0, 0.0), {"s" * 201: (1.0, 0.0)})

    for method in (route, long_name):
        cls = type("Wide", (RoutingPolicy,), {"route": method})
        assert f"breakdown: None, or at most {MAX_BREAKDOWN} scorer names" in run_with(
            "routing", cls, 2)


@pytest.mark.parametrize("key", [tuple(range(MAX_KEY_ITEMS + 1)), (0, "x" * 201)])
def test_user_sort_keys_are_bounded(key):
    """A key per waiting request: an unbounded tuple or string is held for the queue's life."""
    cls = type("Long", (InstanceScheduler,), {"order_key": staticmethod(lambda v, p: key)})
    assert f"a tuple of at most {MAX_KEY_ITEMS} finite numbers" in run_with("scheduler", cls)


def test_user_routing_filtered_ids_must_be_routable_instances():
    def route(self, req, priority, snapshots, state, clock):
        return RoutingDecision(snapshots[0].id, "", (1.0, 0.0), filtered=("instance_9",))

    cls = type("Filters", (RoutingPolicy,), {"route": route})
    assert "filtered: a tuple of routable instance ids" in run_with("routing", cls, 2)


def test_user_routing_policy_declaring_reads_shadow_kv_gets_the_router_model():
    seen = []

    def route(self, req, priority, snapshots, state, clock):
        seen.append(state.shadow_kv.expected_hit(snapshots[0].id, req.prefix_hashes))
        return RoutingDecision(snapshots[0].id, "", (1.0, 0.0))

    cls = type("Reader", (RoutingPolicy,), {"route": route, "reads_shadow_kv": True})
    result = blis_simpy.run(scenario(**merge(PRESSURE, {
        "cluster": {"instances": 2}, "workload": {"prefix_tokens": 32},
        "policies": {"routing": {"type": install(cls)}}})))
    assert result.summary["completed_requests"] == 24
    assert seen[0] == 0 and set(seen[1:]) == {2}  # the shared prefix: 2 blocks, once routed


def test_user_constructor_that_raises_fails_before_the_run():
    cls = type("Broken", (RoutingPolicy,), {"__init__": lambda self, params: 1 / 0})
    with pytest.raises(ScenarioError) as err:
        prepare(scenario(policies={"routing": {"type": install(cls)}}))
    assert err.value.path == "policies.routing.params"
    assert "ZeroDivisionError" in str(err.value)


def test_user_module_that_fails_to_import_is_reported(tmp_path, monkeypatch):
    (tmp_path / "explodes_on_import.py").write_text("raise RuntimeError('half-written file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioError) as err:
        prepare(scenario(policies={"routing": {"type": "explodes_on_import:R"}}))
    assert err.value.path == "policies.routing.type"
    assert "RuntimeError: half-written file" in str(err.value)


def test_numpy_numbers_from_user_policies_are_accepted():
    """A policy computing with numpy returns numpy scalars: they are numbers, used as Python
    ones (they were refused as the wrong type)."""
    import numpy as np

    rank = type("NpRank", (PriorityPolicy,), {
        "compute": lambda self, req, state, clock: np.float64(req.input_tokens)})
    victim = type("NpVictim", (InstanceScheduler,), {
        "victim": lambda self, candidates, priorities: np.int64(len(candidates) - 1)})
    result = blis_simpy.run(scenario(**merge(PRESSURE, {"policies": {
        "priority": {"type": install(rank)}, "scheduler": {"type": install(victim)}}})))
    assert result.summary["completed_requests"] == 24
    assert result.summary["preemption_count"] > 0


@pytest.mark.parametrize("axis, base, method", [
    ("admission", AdmissionPolicy, "decide"), ("priority", PriorityPolicy, "compute"),
    ("routing", RoutingPolicy, "route")])
def test_user_class_without_its_method_fails_before_the_run(axis, base, method):
    """It used to fail only at its first call, possibly minutes into a run."""
    cls = type("Empty", (base,), {})
    with pytest.raises(ScenarioError) as err:
        prepare(scenario(policies={axis: {"type": install(cls)}}))
    assert err.value.path == f"policies.{axis}"
    assert f"does not define {method}(" in str(err.value)


def test_templates_run_unguarded():
    from blis_simpy.policies.guard import GuardedRouting

    sim = prepare(scenario())
    assert not isinstance(sim.gateway.routing, GuardedRouting)


# --- through the console script ----------------------------------------------------------------

USER_POLICY = """
    from blis_simpy.policies.routing import RoutingPolicy

    class Picky(RoutingPolicy):
        def route(self, req, priority, snapshots, state, clock):
            return None
"""


def console_script() -> str:
    return str(Path(sys.executable).parent / "blis-simpy")


def test_user_policy_is_importable_from_the_current_folder_through_the_console_script(
        tmp_path):
    """Defect 3: `module:Class` next to the user, run by the installed `blis-simpy` (whose
    sys.path[0] is its bin folder, not the current one)."""
    (tmp_path / "mypolicies.py").write_text(textwrap.dedent(USER_POLICY).replace(
        "return None", "return RoutingDecision(snapshots[0].id, 'first', "
        "tuple(0.0 for _ in snapshots))").replace(
        "import RoutingPolicy", "import RoutingDecision, RoutingPolicy"))
    data = merge(BASE, {"workload": {"num_requests": 5}, "outputs": {"tables": "csv"},
                        "policies": {"routing": {"type": "mypolicies:Picky"}}})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    done = subprocess.run([console_script(), "run", "s.yaml", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "test" / "summary.json").is_file()


def test_user_policy_returning_none_exits_2_naming_it(tmp_path):
    (tmp_path / "mypolicies.py").write_text(textwrap.dedent(USER_POLICY))
    data = merge(BASE, {"workload": {"num_requests": 5},
                        "policies": {"routing": {"type": "mypolicies:Picky"}}})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    done = subprocess.run([console_script(), "run", "s.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: policies.routing: mypolicies:Picky.route for "
                                  "request request_0 returned None; expected a RoutingDecision")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "out").exists()
