"""Fuzzing the scenario boundary: a few hundred scenarios with one value made bad.

Each generated scenario is a small library-like scenario with one leaf (any depth, any
section) replaced by a hostile value: wrong types, out-of-domain numbers, NaN and infinities,
huge and tiny magnitudes, strings that look like paths. The contract: loading raises
ScenarioError naming the field's path, or the scenario is valid and runs to the end (bounded
in wall time) with finite summary numbers. Anything else (a traceback from deep inside, a
hang, an overflow) fails.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_simpy.api import prepare, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.build import RunProgress
from tests.conftest import BASE, merge

TENANT = {"prompt": {"type": "gaussian", "mean": 200, "stdev": 50, "min": 8, "max": 800},
          "output": {"type": "exponential", "mean": 20, "min": 1, "max": 100}}
# issue 34 items 7, 9: correlated lengths, archetypes, a session Markov model, seed parts
CORRELATED: dict[str, Any] = {**{k: v for k, v in BASE.items() if k != "workload"},
    "seeds": {"workload": 3, "sim": 4, "jitter": 5},
    "workload": {"type": "tenants", "rate_per_s": 8, "duration_s": 1,
                 "archetypes": [{"id": "small", "prompt": {"type": "constant", "value": 20},
                                 "length_correlation": -0.5},
                                {"id": "big", "output": {"type": "uniform", "low": 5,
                                                         "high": 60}}],
                 "tenants": [{"id": "a", "length_correlation": 0.7,
                              "archetypes": {"small": 2, "big": 1}, **TENANT},
                             {"id": "b", "request_type": "chat", **TENANT,
                              "chat": {"think_time_s": {"type": "constant", "value": 0.05},
                                       "session": {"start": "q", "max_turns": 4, "states": [
                                           {"id": "q", "next": {"f": 0.6, "q": 0.2},
                                            "output": {"type": "constant", "value": 9}},
                                           {"id": "f", "next": {"q": 0.5},
                                            "think_time_s": {"type": "exponential",
                                                             "mean": 0.02}}]}}}]}}
# issue 35 item 4: a mixture of experts on data-parallel ranks with expert parallelism
MOE: dict[str, Any] = {
    **{k: v for k, v in BASE.items() if k not in ("model", "latency", "workload")},
    "model": {"name": "mistralai/mixtral-8x7b-instruct-v0.1", "gpu": "H100", "tp": 1, "dp": 2,
              "expert_parallel": True, "moe_comm": "pplx"},
    "latency": {"type": "physical"},
    "workload": {"type": "distribution", "num_requests": 8, "rate_per_s": 20,
                 "prompt": {"mean": 300, "stdev": 150, "min": 8, "max": 1200},
                 "output": {"mean": 20, "stdev": 10, "min": 1, "max": 100}}}
BASES: list[dict[str, Any]] = [
    merge(BASE, {"workload": {"num_requests": 8}}),
    merge(BASE, {"cluster": {"instances": 2},
                 "policies": {"routing": {"type": "weighted"},
                              "admission": {"type": "token-bucket"}},
                 "workload": {"num_requests": 8}}),
    {**{k: v for k, v in BASE.items() if k != "workload"},
     "workload": {"type": "tenants", "rate_per_s": 8, "duration_s": 1,
                  "load_profile": {"type": "step",
                                   "steps": [{"at_s": 0.5, "multiplier": 2.0}]},
                  "tenants": [{"id": "a", "rate_fraction": 0.5, "arrival": {"type": "gamma",
                                                                            "cv": 2.0},
                               **TENANT},
                              {"id": "b", "rate_fraction": 0.5, "slo_class": "batch",
                               "closed_loop": {"users": 2}, **TENANT}]}},
    merge(BASE, {"cluster": {"instances": 2, "trace_level": "decisions", "top_k": 2,
                             "shadow_kv_capacity": 100},
                 "policies": {"routing": {"type": "prefix-affinity"}},
                 "outputs": {"trace_formats": ["jsonl", "perfetto"]},
                 "workload": {"num_requests": 8, "prefix_tokens": 32}}),
    # issue 35: a gateway queue, tier-shed admission, the scorers reading real caches
    {**{k: v for k, v in BASE.items() if k != "workload"},
     "cluster": {"instances": 2,
                 "observability": {"cached_blocks": {"mode": "periodic", "interval_s": 0.01}},
                 "flow_control": {"saturation": {"type": "concurrency", "max_in_flight": 2},
                                  "max_queue_depth": 4, "band_capacities": {"batch": 2},
                                  "on_full": "shed-lowest", "dispatch_order": "slo-deadline",
                                  "fairness": "round-robin", "usage_limit": 0.5,
                                  "queue_ttl_s": 0.5, "priorities": {"gold": 5}}},
     "policies": {"admission": {"type": "tier-shed", "params": {"threshold": 1}},
                  "routing": {"type": "weighted", "params": {"scorers": {
                      "precise-prefix-cache": 2, "no-hit-lru": 1, "load-aware": 1}}}},
     "workload": {"type": "tenants", "rate_per_s": 16, "duration_s": 1,
                  "tenants": [{"id": "a", "slo_class": "gold", **TENANT},
                              {"id": "b", "slo_class": "batch", "timeout_s": 0.3,
                               **TENANT}]}},
    CORRELATED,
    MOE,
    # issue 35: replicas placed on node pools that may grow
    {**{k: v for k, v in BASE.items() if k != "workload"},
     "deployment": {
         "node_pools": [{"id": "h100", "gpu": "H100", "gpus_per_node": 2, "nodes": 1,
                         "max_nodes": 2, "provisioning_s": {"type": "constant", "value": 0.2}}],
         "models": [{"name": "meta-llama/llama-3.1-8b-instruct",
                     "configs": [{"id": "c", "node_pool": "h100",
                                  "replicas": {"min": 1, "max": 4}}]}],
         "autoscaler": {"interval_s": 0.2, "policy": {"type": "queue-depth",
                                                       "params": {"up_per_replica": 1}}}},
     "workload": {"type": "tenants", "rate_per_s": 16, "duration_s": 1,
                  "tenants": [{"id": "a", **TENANT}]}},
    # issue 35 item 1: LoRA adapter slots, tenants drawing adapters, the affinity scorer
    {**{k: v for k, v in BASE.items() if k not in ("workload", "engine")},
     "engine": {"kv_blocks": 2000,
                "lora": {"slots": 2, "load_ms": 5, "load_ms_per_rank": 0.5}},
     "cluster": {"instances": 2},
     "policies": {"routing": {"type": "weighted", "params": {"scorers": {
         "lora-affinity": 2, "queue-depth": 1}}}},
     "workload": {"type": "tenants", "rate_per_s": 16, "duration_s": 1,
                  "tenants": [{"id": "a", "adapters": {"count": 4, "zipf": 1.2, "rank": 8,
                                                       "fraction": 0.8}, **TENANT},
                              {"id": "b", "adapters": {"count": 3}, **TENANT}]}},
    # issue 35 item 7: speculative decoding, a tenant's own acceptance rate
    {**{k: v for k, v in BASE.items() if k not in ("workload", "engine")},
     "engine": {"kv_blocks": 2000,
                "speculative": {"method": "ngram", "draft_tokens": 3, "acceptance_rate": 0.7,
                                "tenant_acceptance": {"a": 0.9}}},
     "workload": {"type": "tenants", "rate_per_s": 16, "duration_s": 1,
                  "tenants": [{"id": "a", **TENANT}, {"id": "b", **TENANT}]}},
]

HOSTILE = st.sampled_from([
    None, True, -1, 0, 1, -1.5, 1e-300, -1e-300, 1e300, 2**70, -(2**70), math.nan, math.inf,
    -math.inf, "", "x", "../../etc", "1e3", [], [1, 2], {}, {"a": 1},
])
WALL_LIMIT_S = 20.0


def leaves(tree: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a scalar or list in a plain scenario tree."""
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in leaves(v, (*path, k))]
    if isinstance(tree, list) and tree and isinstance(tree[0], dict):
        return [p for i, v in enumerate(tree) for p in leaves(v, (*path, i))]
    return [path]


def replaced(tree: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(tree)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def dotted(path: tuple) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


class Budget:
    """A progress callback that stops a run taking too long: a fuzz case must never hang."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, progress: RunProgress) -> None:
        assert time.perf_counter() - self.started < WALL_LIMIT_S, "the run does not end"


def check(data: dict[str, Any], path: tuple) -> None:
    try:
        sim = prepare(Scenario.from_dict(data))
    except ScenarioError as exc:
        top = dotted(path[:1])
        assert exc.path.startswith(top) or top in str(exc), (dotted(path), str(exc))
        return
    result = simulate(sim, Budget())
    for key, value in result.summary.items():
        if isinstance(value, float):
            assert math.isfinite(value), (dotted(path), key, value)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], tuple]:
    base = draw(st.sampled_from(BASES))
    path = draw(st.sampled_from(leaves(base)))
    return replaced(base, path, draw(HOSTILE)), path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_bad_value_anywhere_is_a_clear_error_or_a_bounded_run(case):
    check(*case)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASES), st.lists(st.text(min_size=1, max_size=12), min_size=1,
                                        max_size=3), HOSTILE)
def test_an_unknown_key_anywhere_names_its_path(base, keys, value):
    data = copy.deepcopy(base)
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {}) if isinstance(node.get(key), dict | None) else node
    node[keys[-1]] = value
    check(data, (keys[0],))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(leaves(CORRELATED)), HOSTILE)
def test_correlation_archetype_session_and_seed_keys_fuzzed(path, value):
    """Seed 001 §7 and §13's keys (length_correlation, archetypes, chat.session, seeds) under
    the same contract as every section: a clear error naming the key, or a bounded run."""
    check(replaced(CORRELATED, path, value), path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(leaves(MOE)), HOSTILE)
def test_item4_data_and_expert_parallelism_keys_fuzzed(path, value):
    """model.dp, model.expert_parallel, model.moe_comm and their neighbours under the same
    contract: a clear error naming the key, or a bounded run."""
    check(replaced(MOE, path, value), path)
