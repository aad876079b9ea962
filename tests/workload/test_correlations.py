"""Seed 001 §7's correlation structure on the tenants workload: correlated prompt and output
lengths (a Gaussian copula), user archetypes (named request shapes mixed by share), and the
session Markov model (turn states with transition probabilities and think times).

Tolerances as in test_tenants.py: a frequency within 5 standard errors of its expectation; a
Spearman rank correlation within 5 of its large-sample standard error, 1/sqrt(n - 1).
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import numpy as np
import pytest

import blis_simpy
from blis_simpy.core.errors import ScenarioError
from tests.workload.test_tenants import (
    binomial_ok,
    const,
    generate,
    sessions,
    simulate,
    tenants_scenario,
    within,
)

LOGNORMAL = {"type": "lognormal", "mean": 400, "sigma": 0.8, "min": 4, "max": 20_000}
EXPONENTIAL = {"type": "exponential", "mean": 150, "min": 1, "max": 8000}


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation, ties given their mean rank."""
    def ranks(v: np.ndarray) -> np.ndarray:
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for value in np.unique(v):  # mean rank for ties
            same = v == value
            r[same] = r[same].mean()
        return r
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def lengths(rho: float, seed: int = 7, **tenant: Any) -> tuple[np.ndarray, np.ndarray]:
    s = tenants_scenario([{"id": "t", "prompt": LOGNORMAL, "output": EXPONENTIAL,
                           "length_correlation": rho, **tenant}],
                         seed=seed, rate_per_s=400, duration_s=10)
    reqs, _ = generate(s)
    return (np.array([r.input_len for r in reqs], dtype=float),
            np.array([r.output_len for r in reqs], dtype=float))


@pytest.mark.parametrize("rho", [0.8, -0.6, 0.3])
def test_prompt_output_length_correlation_is_a_gaussian_copula(rho):
    """Seed 001 §7 CorrelationConfig: prompt and output lengths correlate with a stated
    coefficient. A Gaussian copula with rho gives Spearman's rank correlation
    (6/pi) asin(rho/2) whatever the two shapes (lognormal and exponential here), within 5 SE
    over ~4,000 requests; each length keeps its own distribution (means within 5 SE of the
    uncorrelated tenant's)."""
    prompt, output = lengths(rho)
    n = len(prompt)
    assert n > 3500
    expected = 6 / math.pi * math.asin(rho / 2)
    assert within(spearman(prompt, output), expected, 1 / math.sqrt(n - 1)), expected
    free_prompt, free_output = lengths(0.0, seed=8)
    assert abs(spearman(free_prompt, free_output)) < 5 / math.sqrt(n - 1)
    for ours, free in ((prompt, free_prompt), (output, free_output)):
        se = math.sqrt(ours.var() / len(ours) + free.var() / len(free))
        assert within(ours.mean(), free.mean(), se)


def test_prompt_output_length_correlation_zero_draws_as_before():
    """Seed 001 §7: the correlation is optional; 0 (the default) draws exactly as a scenario
    without the key (the same requests, byte for byte)."""
    a, _ = generate(tenants_scenario([{"id": "t", "prompt": LOGNORMAL,
                                       "output": EXPONENTIAL}], rate_per_s=50, duration_s=2))
    b, _ = generate(tenants_scenario([{"id": "t", "prompt": LOGNORMAL, "output": EXPONENTIAL,
                                       "length_correlation": 0.0}], rate_per_s=50,
                                     duration_s=2))
    assert [(r.arrival, r.input_len, r.output_len) for r in a] == \
        [(r.arrival, r.input_len, r.output_len) for r in b]


ARCHETYPES = [{"id": "casual", "prompt": const(10), "output": const(5)},
              {"id": "power", "prompt": const(300), "output": const(90)},
              {"id": "inherits", "output": const(33)}]


def test_user_archetypes_mix_request_shapes_by_share():
    """Seed 001 §7 TenantArchetype: a tenant's traffic is a named mix of user archetypes,
    each arrival one archetype's by its share (3:1:0 here, so the rate splits 3/4, 1/4, 0);
    an archetype's unset lengths are the tenant's. Frequencies within 5 SE."""
    s = tenants_scenario([{"id": "t", "prompt": const(50), "output": const(7),
                           "archetypes": {"casual": 3, "power": 1, "inherits": 0}}],
                         rate_per_s=200, duration_s=10, archetypes=ARCHETYPES)
    reqs, _ = generate(s)
    shapes = [(r.input_len, r.output_len) for r in reqs]
    assert set(shapes) == {(10, 5), (300, 90)}
    n = len(shapes)
    assert binomial_ok(shapes.count((10, 5)), n, 0.75)
    s = tenants_scenario([{"id": "t", "prompt": const(50), "archetypes": {"inherits": 1}}],
                         rate_per_s=50, duration_s=1, archetypes=ARCHETYPES)
    assert {(r.input_len, r.output_len) for r in generate(s)[0]} == {(50, 33)}


def test_user_archetypes_hold_for_a_whole_session():
    """Seed 001 §7: an archetype is a user's stable latent shape, so a chat session's every
    turn is the same archetype's (its outputs all one length)."""
    s = tenants_scenario([{"id": "c", "request_type": "chat", "prompt": const(10),
                           "archetypes": {"casual": 1, "power": 1},
                           "chat": {"turns": const(3), "think_time_s": const(0.01)}}],
                         rate_per_s=5, duration_s=4, archetypes=ARCHETYPES)
    by_session = sessions(simulate(s))
    kinds = {frozenset(r.output_len for r in turns) for turns in by_session.values()}
    assert kinds == {frozenset({5}), frozenset({90})}


STATES = [
    {"id": "ask", "output": const(5), "think_time_s": const(0.1),
     "next": {"follow": 0.5, "ask": 0.2}},  # 0.3: the session ends
    {"id": "follow", "output": const(7), "think_time_s": const(0.3), "next": {"ask": 1.0}},
]


def markov_scenario(states: list[dict[str, Any]], max_turns: int = 64, seed: int = 7):
    return tenants_scenario([{"id": "m", "request_type": "chat", "prompt": const(4),
                              "chat": {"context_growth": "sublinear", "session": {
                                  "start": "ask", "states": states,
                                  "max_turns": max_turns}}}],
                            seed=seed, rate_per_s=8, duration_s=30)


def test_session_markov_model_walks_states_with_their_probabilities_and_think_times():
    """Seed 001 §7 SessionMarkovModel: a session is a walk over turn states; each state sets
    its turn's lengths and the think time after it, and its transition probabilities the next
    state (the rest ends the session). Transition frequencies out of `ask` within 5 SE of
    0.5 / 0.2 / 0.3; `follow` always goes on; every gap between a completion and the next
    turn is the state's think time exactly."""
    reqs = simulate(markov_scenario(STATES))
    by_session = sessions(reqs)
    state = {5: "ask", 7: "follow"}
    moves = {"follow": 0, "ask": 0, "end": 0}
    for turns in by_session.values():
        walk = [state[r.output_len] for r in turns]
        assert walk[0] == "ask"
        if len(turns) and turns[-1].state.name != "COMPLETED":
            continue  # a session the run's end cut short
        for here, there in zip(walk, [*walk[1:], "end"], strict=True):
            if here == "ask":
                moves[there] += 1
            else:
                assert there == "ask"
        for prev, nxt in pairwise(turns):
            think = {"ask": 100_000, "follow": 300_000}[state[prev.output_len]]
            assert nxt.arrival - prev.completed_at == think
    n = sum(moves.values())
    assert n > 300
    for move, p in (("follow", 0.5), ("ask", 0.2), ("end", 0.3)):
        assert binomial_ok(moves[move], n, p), (move, moves, n)


def test_session_markov_model_ends_at_max_turns():
    """Seed 001 §7: a walk that never leaves (ask -> ask with probability 1) ends at
    max_turns."""
    loop = [{"id": "ask", "output": const(5), "think_time_s": const(0.01),
             "next": {"ask": 1.0}}]
    by_session = sessions(simulate(markov_scenario(loop, max_turns=3)))
    assert by_session and {len(t) for t in by_session.values()} <= {1, 2, 3}
    assert max(len(t) for t in by_session.values()) == 3


def session(**changes: Any) -> dict[str, Any]:
    return {"start": "ask", "states": STATES, **changes}


@pytest.mark.parametrize(("tenant", "workload", "key"), [
    ({"length_correlation": 1.5}, {}, "workload.tenants[0].length_correlation"),
    ({"length_correlation": 0.5, "prompt": {"type": "pareto-lognormal", "alpha": 2,
                                            "xm": 10, "mu": 3, "sigma": 1, "mix_weight": 0.5}},
     {}, "workload.tenants[0].length_correlation"),
    ({"archetypes": {"nobody": 1}}, {"archetypes": ARCHETYPES},
     "workload.tenants[0].archetypes.nobody"),
    ({"archetypes": {"casual": 0}}, {"archetypes": ARCHETYPES},
     "workload.tenants[0].archetypes"),
    ({"archetypes": {"casual": -1}}, {"archetypes": ARCHETYPES},
     "workload.tenants[0].archetypes.casual"),
    ({}, {"archetypes": [ARCHETYPES[0], ARCHETYPES[0]]}, "workload.archetypes[1].id"),
    ({"request_type": "chat", "chat": {"session": session(start="x")}}, {},
     "workload.tenants[0].chat.session.start"),
    ({"request_type": "chat", "chat": {"session": session(states=[
        {"id": "a", "next": {"b": 0.5}}])}}, {},
     "workload.tenants[0].chat.session.states[0].next.b"),
    ({"request_type": "chat", "chat": {"session": session(states=[
        {"id": "ask", "next": {"ask": 0.7}}, {"id": "b", "next": {"ask": 1.2}}])}}, {},
     "workload.tenants[0].chat.session.states[1].next.ask"),
    ({"request_type": "chat", "chat": {"session": session(states=[
        {"id": "ask", "next": {"ask": 0.7, "b": 0.7}}, {"id": "b"}])}}, {},
     "workload.tenants[0].chat.session.states[0].next"),
    ({"request_type": "chat", "chat": {"session": session(states=[
        {"id": "ask"}, {"id": "ask"}])}}, {}, "workload.tenants[0].chat.session.states[1].id"),
    ({"request_type": "chat", "chat": {"turns": const(3), "session": session()}}, {},
     "workload.tenants[0].chat.turns"),
    ({"chat": {"session": session()}}, {}, "workload.tenants[0].chat"),
])
def test_correlation_archetype_and_session_keys_are_validated(tenant, workload, key):
    """Seed 001 §7 keys are validated like every section: the error names the key."""
    with pytest.raises(ScenarioError) as err:
        tenants_scenario([{"id": "t", **tenant}], **workload)
    assert err.value.path == key


def test_session_markov_model_work_is_bounded_before_the_run():
    """Seed 001 §7 session model under the work bounds (workload/work.py): a walk that never
    ends has max_turns turns, each carrying its history; too many tokens in all is refused
    before the run, naming the key, as a fixed-turn chat is."""
    huge = [{"id": "ask", "output": const(5000), "next": {"ask": 1.0}}]
    with pytest.raises(ScenarioError, match="818,514,288,000 tokens") as err:
        blis_simpy.run(markov_scenario(huge, max_turns=10_000))
    assert err.value.path == "workload.tenants[0].chat.session"
    # 8/s for 30 s, 10,000 turns of 5,004 tokens plus the last ceil(sqrt(k)) exchanges each:
    # the estimate is exact for a walk that never ends
    turns = range(10_000)
    assert 240 * sum(5004 + 5004 * math.ceil(math.sqrt(k)) for k in turns) == 818_514_288_000
    # an archetype's longer shape counts too: the longest one bounds the request size
    big = [{"id": "big", "prompt": const(9_000_000), "output": const(2_000_000)}]
    with pytest.raises(ScenarioError) as err:
        blis_simpy.run(tenants_scenario([{"id": "t", "archetypes": {"big": 1}}],
                                        archetypes=big))
    assert err.value.path == "workload.tenants[0].prompt"
