"""The multi-tenant workload (`workload: {type: tenants}`): what each tenant sends, checked
against its configuration, mostly through the per-request table.

Statistical checks use fixed seeds and state their tolerance: a count with Poisson or
binomial spread is accepted within 5 standard errors (SE) of its expectation, which a correct
generator fails about once in 1.7 million runs. Exact checks (constant distributions) need
no tolerance.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd
import pytest
import simpy

import blis_simpy
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.request import Request
from blis_simpy.sim.build import build
from blis_simpy.workload.tenants import TenantWorkload
from tests.conftest import BASE

BLOCK = 16


def const(value: float) -> dict[str, Any]:
    return {"type": "constant", "value": value}


def tenants_scenario(tenants: list[dict[str, Any]], seed: int = 7, horizon_s: float | None = None,
                     engine: dict[str, Any] | None = None, instances: int = 1,
                     **workload: Any) -> Scenario:
    """The conftest base (Llama-3.1-8B coefficients) with a tenants workload."""
    data = copy.deepcopy(BASE)
    data["seed"] = seed
    data["horizon_s"] = horizon_s
    data["engine"] = {"kv_blocks": 20_000, **(engine or {})}
    data["cluster"] = {"instances": instances}
    data["workload"] = {"type": "tenants", "tenants": tenants, **workload}
    return Scenario.from_dict(data)


def simulate(s: Scenario) -> list[Request]:
    """Run a scenario and return its requests with their token ids kept."""
    sim = build(resolve(s), keep_tokens=True)
    sim.run()
    return sim.recorder.requests


def generate(s: Scenario) -> tuple[list[Request], TenantWorkload]:
    """Only the workload, in a bare environment: open-loop requests as generated (a session
    or closed-loop user would wait for ever for its first response, so use it only for
    single-request tenants)."""
    env = simpy.Environment()
    got: list[Request] = []
    source = TenantWorkload(env, s.workload, s.seed, got.append)
    env.run()
    return got, source


def within(observed: float, expected: float, se: float, k: float = 5.0) -> bool:
    return abs(observed - expected) <= k * se


def poisson_ok(count: int, mean: float) -> bool:
    return within(count, mean, math.sqrt(mean))


def binomial_ok(hits: int, n: int, p: float) -> bool:
    return within(hits / n, p, math.sqrt(p * (1 - p) / n))


def sessions(reqs: list[Request]) -> dict[str, list[Request]]:
    out: dict[str, list[Request]] = defaultdict(list)
    for r in reqs:
        out[r.session_id].append(r)
    for turns in out.values():
        turns.sort(key=lambda r: r.turn)
    return out


def starts_with(tokens: np.ndarray, prefix: np.ndarray) -> bool:
    return len(tokens) >= len(prefix) and np.array_equal(tokens[:len(prefix)], prefix)


# --------------------------------------------------------------------------- rates and prefixes


def test_tenant_rate_fractions_share_the_open_loop_rate():
    """Each open-loop tenant is a Poisson stream at rate_per_s * fraction / (sum of open-loop
    fractions): closed-loop tenants and zero fractions take no share. Counts within 5 SE
    (sqrt of the expected count, 60-3000 here)."""
    s = tenants_scenario([
        {"id": "a", "rate_fraction": 0.5},
        {"id": "b", "rate_fraction": 0.3},
        {"id": "c", "rate_fraction": 0.2},
        {"id": "idle", "rate_fraction": 0.0},
        {"id": "users", "rate_fraction": 5.0, "closed_loop": {"users": 1}},
    ], rate_per_s=100, duration_s=60)
    reqs, _ = generate(s)
    counts = pd.Series([r.tenant_id for r in reqs]).value_counts()
    for tenant, fraction in (("a", 0.5), ("b", 0.3), ("c", 0.2)):
        assert poisson_ok(counts[tenant], 100 * 60 * fraction), (tenant, counts[tenant])
    assert "idle" not in counts


def test_prefix_reuse_fraction_and_group_popularity():
    """A request reuses a prefix with reuse_probability, then picks a group by popularity
    among the tenant's groups; its prompt starts with that group's token ids. Binomial
    proportions within 5 SE."""
    s = tenants_scenario([
        {"id": "t", "rate_fraction": 0.7, "prefix": {"reuse_probability": 0.8}},
        {"id": "u", "rate_fraction": 0.3, "prefix": {"groups": ["a"], "reuse_probability": 0.3}},
    ], rate_per_s=100, duration_s=40, prefix_groups=[
        {"id": "a", "length": const(256), "popularity": 1},
        {"id": "b", "length": const(160), "popularity": 3},
    ])
    reqs, source = generate(s)
    a, b = source.prefix_tokens["a"], source.prefix_tokens["b"]
    assert (len(a), len(b)) == (256, 160)
    for tenant, p_reuse, p_b in (("t", 0.8, 0.75), ("u", 0.3, 0.0)):
        mine = [r for r in reqs if r.tenant_id == tenant]
        uses_a = sum(starts_with(r.tokens, a) for r in mine)
        uses_b = sum(starts_with(r.tokens, b) for r in mine)
        assert binomial_ok(uses_a + uses_b, len(mine), p_reuse), (tenant, uses_a, uses_b)
        if p_b:
            assert binomial_ok(uses_b, uses_a + uses_b, p_b), (tenant, uses_a, uses_b)
        else:
            assert uses_b == 0


def test_prefix_reuse_shows_as_cached_tokens():
    """Through the engine (one instance, KV for everything, a request every ~50 ms): a
    reusing request's prompt hits the cache for exactly its group's prefix (both lengths are
    whole blocks), a fresh one not at all. The hit fraction is within 5 SE of 0.8 (the first
    request of each group is a miss, well inside the tolerance)."""
    s = tenants_scenario([{"id": "t", "prefix": {"reuse_probability": 0.8},
                           "prompt": {"type": "uniform", "low": 20, "high": 200},
                           "output": const(8)}],
                         rate_per_s=20, duration_s=50, prefix_groups=[
                             {"id": "a", "length": const(256)},
                             {"id": "b", "length": const(160), "popularity": 3}])
    df = blis_simpy.run(s).requests
    assert set(df.cached_tokens) <= {0, 160, 256}
    hits = int((df.cached_tokens > 0).sum())
    assert binomial_ok(hits, len(df), 0.8), (hits, len(df))
    assert binomial_ok(int((df.cached_tokens == 160).sum()), hits, 0.75)


# --------------------------------------------------------------------------- sessions


def chat_tenant(**chat: Any) -> dict[str, Any]:
    return {"id": "chat", "request_type": "chat",
            "prompt": const(10), "output": const(6),
            "chat": {"think_time_s": const(0.05), **chat}}


def test_turns_per_session_follow_the_turns_distribution():
    """Turns per session drawn from {1: 1, 3: 2, 6: 1}: each frequency within 5 SE of
    0.25 / 0.5 / 0.25 over ~400 sessions; turns are numbered 0..n-1 without gaps."""
    s = tenants_scenario([chat_tenant(turns={"type": "empirical", "bins": {1: 1, 3: 2, 6: 1}})],
                         rate_per_s=10, duration_s=40)
    by_session = sessions(simulate(s))
    n = len(by_session)
    assert n > 300
    for turns in by_session.values():
        assert [r.turn for r in turns] == list(range(len(turns)))
    lengths = pd.Series([len(t) for t in by_session.values()]).value_counts()
    assert set(lengths.index) == {1, 3, 6}
    for value, p in ((1, 0.25), (3, 0.5), (6, 0.25)):
        assert binomial_ok(lengths[value], n, p), (value, lengths[value], n)


def test_chat_turn_carries_the_previous_prompt_and_answer_and_hits_the_cache():
    """Linear growth: turn k's prompt is turn k-1's prompt + its answer + a new message (the
    token ids themselves); the whole shared prefix starts every turn; and on one instance with
    ample KV, turn k's cached tokens cover turn k-1's sequence up to its last full block (vLLM
    computes no KV for the last generated token)."""
    s = tenants_scenario([{
        "id": "chat", "request_type": "chat", "prefix": {"reuse_probability": 1.0},
        "prompt": {"type": "uniform", "low": 20, "high": 60},
        "output": {"type": "uniform", "low": 5, "high": 40},
        "chat": {"turns": const(5), "think_time_s": const(0.2), "context_growth": "linear"},
    }], rate_per_s=2, duration_s=20, prefix_groups=[{"id": "sys", "length": const(100)}])
    reqs = simulate(s)
    by_session = sessions(reqs)
    assert len(by_session) > 20
    prefix = reqs[0].tokens[:100]
    for turns in by_session.values():
        assert len(turns) == 5
        for prev, cur in pairwise(turns):
            assert starts_with(cur.tokens, prefix)
            assert starts_with(cur.tokens, prev.tokens)  # prompt + answer of the last turn
            message = cur.input_len - prev.input_len - prev.output_len
            assert 20 <= message <= 60
            carried = prev.input_len + prev.output_len
            assert (carried - 1) // BLOCK * BLOCK <= cur.cached_tokens < cur.input_len


@pytest.mark.parametrize("growth", ["linear", "sublinear", "bounded"])
def test_context_growth_bounds(growth):
    """With constant messages (10 tokens) and answers (6), one exchange is 16 tokens and turn
    t's prompt is exactly: linear 16t + 10; sublinear 16*ceil(sqrt(t)) + 10 (the last
    ceil(sqrt t) exchanges); bounded min(16t, 40) + 10 (the history cut from the front to
    max_context_tokens = 40). The carried tokens are the most recent exchanges, in order."""
    s = tenants_scenario([chat_tenant(turns=const(12), context_growth=growth,
                                      max_context_tokens=40)], rate_per_s=1, duration_s=5)
    by_session = sessions(simulate(s))
    assert by_session
    for turns in by_session.values():
        assert len(turns) == 12
        exchanges = [r.tokens[r.input_len - 10:] for r in turns]  # message + answer
        for t, req in enumerate(turns):
            expected = {"linear": 16 * t, "sublinear": 16 * math.ceil(math.sqrt(t)),
                        "bounded": min(16 * t, 40)}[growth] + 10
            assert req.input_len == expected, (growth, t, req.input_len)
            history = np.concatenate([np.zeros(0, dtype=np.int64), *exchanges[:t]])
            carried = req.tokens[:req.input_len - 10]
            assert np.array_equal(carried, history[len(history) - len(carried):])


def test_agentic_steps_carry_output_and_tool_result_after_the_tool_latency():
    """Exact shape with constants: 3 tool calls at most, always taken -> 4 steps; step k+1's
    prompt = step k's prompt + its output (10) + the tool result (30), as token ids."""
    s = tenants_scenario([{
        "id": "agent", "request_type": "agentic", "prompt": const(50), "output": const(10),
        "agentic": {"tool_call_probability": 1.0, "max_tool_calls": const(3),
                    "tool_latency_s": const(0.25), "tool_result_tokens": const(30)},
    }], rate_per_s=2, duration_s=10)
    by_session = sessions(simulate(s))
    assert len(by_session) > 5
    for steps in by_session.values():
        assert [r.turn for r in steps] == [0, 1, 2, 3]
        assert {r.request_type for r in steps} == {"agentic"}
        for prev, cur in pairwise(steps):
            assert cur.input_len == prev.input_len + 10 + 30
            assert starts_with(cur.tokens, prev.tokens)


def test_agentic_step_counts_and_tool_latency_statistics():
    """Random shape: max_tool_calls uniform on 1..4, tool_call_probability 0.5, tool latency
    exponential with mean 0.3 s. Steps never exceed max tool calls + 1 = 5; a task stops
    after its first step with probability 0.5 (within 5 SE); the mean gap between a step's
    completion and the next step's arrival is 0.3 s within 5 SE (SE = 0.3/sqrt(gaps))."""
    s = tenants_scenario([{
        "id": "agent", "request_type": "agentic", "prompt": const(40), "output": const(8),
        "agentic": {"tool_call_probability": 0.5,
                    "max_tool_calls": {"type": "uniform", "low": 0.5, "high": 4.5},
                    "tool_latency_s": {"type": "exponential", "mean": 0.3},
                    "tool_result_tokens": const(20)},
    }], rate_per_s=10, duration_s=60)
    by_session = sessions(simulate(s))
    counts = np.array([len(steps) for steps in by_session.values()])
    assert counts.max() <= 5
    assert binomial_ok(int((counts == 1).sum()), len(counts), 0.5)
    gaps = np.array([(cur.arrival - prev.completed_at) / 1e6 for steps in by_session.values()
                     for prev, cur in pairwise(steps)])
    assert len(gaps) > 200
    assert within(gaps.mean(), 0.3, 0.3 / math.sqrt(len(gaps))), gaps.mean()


def test_reasoning_output_is_longer_by_chain_length_times_tokens_per_step():
    """Constants: answer 50 + 5 steps x 100 tokens = exactly 550 output tokens. Random: 4
    steps of gaussian(100, 30) tokens add 400 on average to the same answer distribution
    as a plain completion tenant; the difference of means is within 5 SE (SE from the two
    sample variances)."""
    s = tenants_scenario([
        {"id": "exact", "request_type": "reasoning", "rate_fraction": 0.2,
         "output": const(50), "reasoning": {"chain_length": const(5),
                                            "tokens_per_step": const(100)}},
        {"id": "thinker", "request_type": "reasoning", "rate_fraction": 0.4,
         "output": {"type": "gaussian", "mean": 200, "stdev": 50, "min": 1},
         "reasoning": {"chain_length": const(4),
                       "tokens_per_step": {"type": "gaussian", "mean": 100, "stdev": 30}}},
        {"id": "plain", "rate_fraction": 0.4,
         "output": {"type": "gaussian", "mean": 200, "stdev": 50, "min": 1}},
    ], rate_per_s=50, duration_s=60)
    reqs, _ = generate(s)
    out = defaultdict(list)
    for r in reqs:
        out[r.tenant_id].append(r.output_len)
    assert set(out["exact"]) == {550}
    thinker, plain = np.array(out["thinker"]), np.array(out["plain"])
    se = math.sqrt(thinker.var() / len(thinker) + plain.var() / len(plain))
    assert within(thinker.mean() - plain.mean(), 400, se), (thinker.mean(), plain.mean(), se)
    assert {r.request_type for r in reqs if r.tenant_id != "plain"} == {"reasoning"}


# --------------------------------------------------------------------------- closed loop


def in_flight(df: pd.DataFrame) -> int:
    """Most requests in flight at once, from arrival_s and completion_s (a completion at the
    same instant as an arrival counts first)."""
    events = sorted([(t, 1) for t in df.arrival_s] + [(t, -1) for t in df.completion_s])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def closed_loop_tenant(users: int) -> dict[str, Any]:
    return {"id": "users", "closed_loop": {"users": users,
                                           "think_time_s": {"type": "exponential", "mean": 0.2}},
            "prompt": const(500), "output": const(100)}


def test_closed_loop_users_stop_at_duration():
    df = blis_simpy.run(tenants_scenario([closed_loop_tenant(6)], duration_s=20)).requests
    assert (df.final_state == "completed").all()
    assert len(df) > 50
    assert df.arrival_s.max() < 20  # users stop sending at duration_s


def test_closed_loop_throughput_falls_when_service_slows():
    """32 users on instances that run 4 requests at a time: one instance serves far fewer
    requests than four in the same 20 s (each user waits longer for each answer)."""
    def run(instances: int) -> pd.DataFrame:
        s = tenants_scenario([closed_loop_tenant(32)], duration_s=20, instances=instances,
                             engine={"max_running_requests": 4})
        return blis_simpy.run(s).requests

    slow, fast = run(1), run(4)
    assert len(slow) < 0.6 * len(fast), (len(slow), len(fast))
    assert slow.e2e_ms.mean() > 2 * fast.e2e_ms.mean()


# --------------------------------------------------------------------------- reacting to completion

def test_next_chat_turn_arrives_the_think_time_after_the_previous_completed():
    """A turn is sent `think_time_s` (0.2 s, constant) after the previous answer completed."""
    s = tenants_scenario([chat_tenant(turns=const(4), think_time_s=const(0.2))],
                         rate_per_s=2, duration_s=10)
    gaps = {cur.arrival - prev.completed_at for turns in sessions(simulate(s)).values()
            for prev, cur in pairwise(turns)}
    assert gaps == {200_000}, f"completion-to-next-turn gaps {sorted(gaps)[:5]} µs"


def test_next_agent_step_arrives_the_tool_latency_after_the_previous_completed():
    """The next step is sent `tool_latency_s` (0.25 s, constant) after the previous step
    completed."""
    s = tenants_scenario([{
        "id": "agent", "request_type": "agentic", "prompt": const(50), "output": const(10),
        "agentic": {"tool_call_probability": 1.0, "max_tool_calls": const(3),
                    "tool_latency_s": const(0.25), "tool_result_tokens": const(30)},
    }], rate_per_s=2, duration_s=10)
    gaps = {cur.arrival - prev.completed_at for steps in sessions(simulate(s)).values()
            for prev, cur in pairwise(steps)}
    assert gaps == {250_000}, f"completion-to-next-step gaps {sorted(gaps)[:5]} µs"


def test_closed_loop_never_has_more_requests_in_flight_than_users():
    """Each of 6 users waits for its response before thinking (exponential, mean 0.2 s) and
    sending again, so at most 6 requests are in flight (arrival_s to completion_s)."""
    df = blis_simpy.run(tenants_scenario([closed_loop_tenant(6)], duration_s=20)).requests
    peak = in_flight(df)
    assert peak > 1
    assert peak <= 6, f"{peak} requests of a 6-user closed loop in flight at once"


# --------------------------------------------------------------------------- behaviours


def simultaneous(df: pd.DataFrame, tenant: str) -> pd.Series:
    """Arrivals per distinct arrival time of one tenant."""
    return df[df.tenant == tenant].groupby("arrival_s").size()


def test_bursty_tenant_sends_groups_of_simultaneous_requests():
    """burst_size 25 about every 4 s (random gaps) on top of a 1 req/s Poisson stream: the
    table shows groups of >= 25 arrivals at one instant, one per burst (10-25 bursts in
    [4 s, 60 s): the expectation is ~15), not all on the 4 s grid; other arrivals are
    single."""
    s = tenants_scenario([{"id": "b", "prompt": const(20), "output": const(4),
                           "behavior": {"type": "bursty", "burst_size": const(25),
                                        "burst_every_s": 4}}],
                         rate_per_s=1, duration_s=60)
    groups = simultaneous(blis_simpy.run(s).requests, "b")
    bursts = groups[groups >= 25]
    assert 8 <= len(bursts) <= 25, len(bursts)
    assert set(groups[groups < 25]) == {1}
    assert any(abs(t / 4 - round(t / 4)) > 1e-6 for t in bursts.index)


def test_adversarial_tenants_burst_together_at_multiples_of_the_period():
    s = tenants_scenario([
        {"id": f"adv{i}", "prompt": const(20), "output": const(4),
         "behavior": {"type": "adversarial", "burst_size": const(10), "burst_every_s": 5}}
        for i in range(2)
    ], rate_per_s=0.5, duration_s=30)
    df = blis_simpy.run(s).requests
    for tenant in ("adv0", "adv1"):
        groups = simultaneous(df, tenant)
        assert list(groups[groups >= 10].index) == [5.0, 10.0, 15.0, 20.0, 25.0]
    at_bursts = df[df.arrival_s.isin([5.0, 10.0, 15.0, 20.0, 25.0])]
    assert (at_bursts.groupby("arrival_s").size() >= 20).all()


def test_abusive_tenant_is_longer_and_faster_by_its_multipliers():
    """Same configured share and lengths as a normal tenant; `abusive` multiplies prompts by 8,
    outputs by 4 (exact with constants) and the rate by 5: counts within 5 SE of 600 and
    3000 (Poisson)."""
    spec = {"rate_fraction": 0.5, "prompt": const(40), "output": const(10)}
    s = tenants_scenario([
        {"id": "normal", **spec},
        {"id": "abuser", **spec, "behavior": {"type": "abusive", "prompt_multiplier": 8,
                                              "rate_multiplier": 5, "output_multiplier": 4}},
    ], rate_per_s=20, duration_s=60)
    df = blis_simpy.run(s).requests
    normal, abuser = df[df.tenant == "normal"], df[df.tenant == "abuser"]
    assert set(normal.input_tokens) == {40} and set(normal.output_tokens) == {10}
    assert set(abuser.input_tokens) == {320} and set(abuser.output_tokens) == {40}
    assert poisson_ok(len(normal), 600), len(normal)
    assert poisson_ok(len(abuser), 3000), len(abuser)


# --------------------------------------------------------------------------- determinism


def mixed(seed: int = 7, other: dict[str, Any] | None = None) -> Scenario:
    """Every kind of tenant at once; `other` changes the chat tenant."""
    return tenants_scenario([
        {"id": "steady", "rate_fraction": 0.5, "arrival": {"type": "gamma", "cv": 2.0},
         "prefix": {"reuse_probability": 0.5},
         "prompt": {"type": "lognormal", "mean": 200, "sigma": 0.5},
         "output": {"type": "gaussian", "mean": 40, "stdev": 10, "min": 1}},
        {"id": "other", "rate_fraction": 0.5, "request_type": "chat",
         "prompt": {"type": "uniform", "low": 20, "high": 80},
         "output": {"type": "gaussian", "mean": 40, "stdev": 10, "min": 1},
         "chat": {"turns": {"type": "uniform", "low": 1, "high": 4}},
         **(other or {})},
        {"id": "users", "request_type": "agentic", "prompt": const(60), "output": const(10),
         "closed_loop": {"users": 3}},
        {"id": "spiky", "rate_fraction": 0.1,
         "behavior": {"type": "bursty", "burst_size": const(5), "burst_every_s": 5}},
    ], seed=seed, rate_per_s=8, duration_s=30,
        prefix_groups=[{"id": "sys", "length": const(64)}])


def test_same_seed_same_table_different_seed_different_table():
    first = blis_simpy.run(mixed()).requests
    pd.testing.assert_frame_equal(first, blis_simpy.run(mixed()).requests)
    other = blis_simpy.run(mixed(seed=8)).requests
    assert len(other) != len(first) or not other.equals(first)
    assert len(first) > 100


@pytest.mark.parametrize("change", [
    {"output": {"type": "constant", "value": 500}},
    {"prompt": {"type": "lognormal", "mean": 2000, "sigma": 1.0}},
    {"arrival": {"type": "gamma", "cv": 3.0}},
    {"behavior": {"type": "bursty", "burst_size": {"type": "constant", "value": 30}}},
    {"request_type": "completion", "chat": None},
], ids=["output", "prompt", "arrival", "behavior", "request_type"])
def test_changing_one_tenant_leaves_another_tenants_requests_unchanged(change):
    """The open-loop tenant `steady` draws from its own streams: whatever the chat tenant
    does (and however much it loads the system), `steady`'s arrival times and token counts
    are the same."""
    def steady(s: Scenario) -> pd.DataFrame:
        df = blis_simpy.run(s).requests
        return df[df.tenant == "steady"][["arrival_s", "input_tokens", "output_tokens"]]

    base, changed = steady(mixed()), steady(mixed(other=change))
    assert len(base) > 50
    pd.testing.assert_frame_equal(base.reset_index(drop=True), changed.reset_index(drop=True))


# --------------------------------------------------------------------------- caps and stops


def test_max_requests_caps_open_loop_requests_and_sessions():
    completions = tenants_scenario([{"id": "t"}], rate_per_s=100, duration_s=10,
                                   max_requests=50)
    reqs = simulate(completions)
    assert len(reqs) == 50
    assert [r.index for r in reqs] == list(range(50))
    chats = tenants_scenario([chat_tenant(turns=const(6))], rate_per_s=5, duration_s=20,
                             max_requests=40)
    assert len(simulate(chats)) == 40


@pytest.mark.parametrize("request_type", ["chat", "agentic"])
@pytest.mark.parametrize("starts", ["burst", "closed-loop"])
def test_max_requests_caps_sessions_started_at_the_same_instant(request_type, starts):
    """Sessions started at one instant (a burst; closed-loop users with no think time) must
    not overshoot max_requests."""
    tenant: dict[str, Any] = {"id": "t", "request_type": request_type,
                              "prompt": const(10), "output": const(4)}
    if starts == "burst":
        tenant["behavior"] = {"type": "bursty", "burst_size": const(20), "burst_every_s": 2}
    else:
        tenant["closed_loop"] = {"users": 20, "think_time_s": const(0)}
    s = tenants_scenario([tenant], rate_per_s=0.01, duration_s=30, max_requests=5)
    issued = len(simulate(s))
    assert issued <= 5, f"max_requests=5 but {issued} {request_type} requests were issued"


def test_sessions_started_at_the_same_instant_get_distinct_ids():
    s = tenants_scenario([{
        "id": "t", "request_type": "chat", "prompt": const(10), "output": const(4),
        "chat": {"turns": const(2), "think_time_s": const(0.1)},
        "behavior": {"type": "adversarial", "burst_size": const(5), "burst_every_s": 2},
    }], rate_per_s=0.01, duration_s=3)
    reqs = simulate(s)
    first_turns = [r for r in reqs if r.turn == 0]
    ids = {r.session_id for r in first_turns}
    assert len(ids) == len(first_turns), f"{len(first_turns)} sessions share ids {sorted(ids)}"


def test_duration_stops_new_sessions_and_the_horizon_stops_running_ones():
    """Without a horizon, sessions started before duration_s run to the end (later turns
    arrive after it); with horizon_s nothing arrives after the horizon, sessions are cut
    short and requests in progress stay unfinished."""
    tenant = {**chat_tenant(turns=const(8), think_time_s=const(2.0)), "output": const(200)}
    free = blis_simpy.run(tenants_scenario([tenant], rate_per_s=4, duration_s=20)).requests
    assert free[free.turn == 0].arrival_s.max() < 20
    assert free.arrival_s.max() > 20
    assert (free.groupby("session").size() == 8).all()
    assert (free.final_state == "completed").all()

    cut = blis_simpy.run(tenants_scenario([tenant], rate_per_s=4, duration_s=20,
                                          horizon_s=12)).requests
    assert cut.arrival_s.max() <= 12
    assert (cut.groupby("session").size() < 8).any()
    assert len(cut) < len(free)
    assert (cut.final_state != "completed").any()


def test_hashing_at_the_source_equals_hashing_at_the_gateway():
    """A run hashes each request in the workload, continuing from its shared prefix's hashes
    and (linear chats, agent loops) the previous request's; a run that keeps token ids leaves
    hashing to the gateway, from scratch. Same cache hits and the same table either way, with
    prefix groups, every context growth, agent loops and reasoning (cache hits are asserted, so
    the comparison is not vacuous)."""
    chat = {"prompt": {"type": "uniform", "low": 5, "high": 60}, "output": const(17),
            "prefix": {"reuse_probability": 0.7}}
    s = tenants_scenario([
        {"id": "lin", "request_type": "chat", **chat,
         "chat": {"turns": const(4), "think_time_s": const(0.1), "context_growth": "linear"}},
        {"id": "sub", "request_type": "chat", **chat,
         "chat": {"turns": const(4), "think_time_s": const(0.1), "context_growth": "sublinear"}},
        {"id": "bnd", "request_type": "chat", **chat,
         "chat": {"turns": const(4), "think_time_s": const(0.1), "context_growth": "bounded",
                  "max_context_tokens": 50}},
        {"id": "agent", "request_type": "agentic", **chat,
         "agentic": {"tool_call_probability": 0.8, "max_tool_calls": const(3),
                     "tool_latency_s": const(0.1), "tool_result_tokens": const(23)}},
        {"id": "think", "request_type": "reasoning", **chat},
    ], rate_per_s=10, duration_s=10, instances=2,
        prefix_groups=[{"id": "a", "length": const(40)}, {"id": "b", "length": const(77)}])

    def table(keep_tokens: bool) -> list[tuple[Any, ...]]:
        sim = build(resolve(s), keep_tokens=keep_tokens)
        sim.run()
        return [(r.name, r.arrival, r.input_len, r.output_len, r.instance, r.cached_tokens,
                 r.completed_at) for r in sim.recorder.requests]

    at_source = table(keep_tokens=False)
    assert sum(row[5] > 0 for row in at_source) > len(at_source) // 4
    assert at_source == table(keep_tokens=True)
