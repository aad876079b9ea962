"""Policy templates through whole runs: small traces with exact token ids, so load, prefix
sharing and contention are controlled, and each assertion tells one template from another."""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import blis_simpy
from blis_simpy.api import run as simulate_scenario
from blis_simpy.core.records import Recorder
from tests.conftest import trace_run_scenario, write_trace

_modules = itertools.count()


def tokens(n: int, start: int) -> list[int]:
    return list(range(start, start + n))


def run(tmp_path: Path, rows, name: str = "t.csv", **changes: Any):
    return blis_simpy.run(trace_run_scenario(write_trace(tmp_path / name, rows), **changes))


def policies(**axes: Any) -> dict[str, Any]:
    """`policies` section: axis=name or axis=(name, params)."""
    out = {}
    for axis, value in axes.items():
        name, params = value if isinstance(value, tuple) else (value, {})
        out[axis] = {"type": name, "params": params}
    return out


def burst(n: int, length: int = 64, out: int = 4, at: float = 0.0):
    return [(at, tokens(length, 1000 * (i + 1)), out) for i in range(n)]


# -- routing --------------------------------------------------------------------------------

def test_round_robin_sends_request_i_to_instance_i_mod_n(tmp_path):
    rows = [*burst(4), *[(0.05 * (i + 1), tokens(64, 50_000 + 100 * i), 4) for i in range(3)]]
    result = run(tmp_path, rows, cluster={"instances": 3},
                 policies=policies(routing="round-robin"))
    assert list(result.requests.instance) == [f"instance_{i % 3}" for i in range(7)]


def test_least_loaded_spreads_a_burst_and_always_busiest_piles_it_up(tmp_path):
    rows = burst(12)
    least = run(tmp_path, rows, cluster={"instances": 4},
                policies=policies(routing="least-loaded"))
    busiest = run(tmp_path, rows, cluster={"instances": 4},
                  policies=policies(routing="always-busiest"))
    # Routed-but-not-queued requests count as load, so a same-instant burst spreads evenly.
    assert least.requests.instance.value_counts().to_dict() == {f"instance_{i}": 3
                                                                for i in range(4)}
    assert list(least.requests.instance) == [f"instance_{i % 4}" for i in range(12)]
    assert busiest.requests.instance.value_counts().to_dict() == {"instance_0": 12}
    assert least.summary["ttft_mean_ms"] < busiest.summary["ttft_mean_ms"]
    assert busiest.summary["completed_requests"] == least.summary["completed_requests"] == 12


def prefix_rows():
    """Two prompt families with a 256-token (16-block) shared prefix and unique 16-token
    suffixes: A0 and B0 together at t=0, then A1 A2 B1 B2 A3 B3 one by one."""
    prefix = {"A": tokens(256, 100_000), "B": tokens(256, 200_000)}
    order = ["A", "B", "A", "A", "B", "B", "A", "B"]
    times = [0.0, 0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30]
    rows = [(t, prefix[f] + tokens(16, 300_000 + 100 * i), 4)
            for i, (t, f) in enumerate(zip(times, order, strict=True))]
    return order, rows


@pytest.mark.parametrize("routing", [
    "prefix-affinity",
    ("weighted", {}),  # the default scorers: prefix-affinity 3, queue-depth 2, kv 2
    ("weighted", {"scorers": {"prefix-affinity": 1, "load-balance": 1}}),
])
def test_prefix_aware_routing_keeps_a_family_together_and_beats_round_robin(tmp_path,
                                                                           routing):
    order, rows = prefix_rows()
    affinity = run(tmp_path, rows, cluster={"instances": 2}, policies=policies(routing=routing))
    rr = run(tmp_path, rows, cluster={"instances": 2},
             policies=policies(routing="round-robin"))
    placed = dict(zip(range(len(order)), affinity.requests.instance, strict=True))
    # A0 takes instance 0 (tie); B0, seeing instance 0 loaded, takes instance 1; then every
    # request follows its family's prefix.
    assert {placed[i] for i, f in enumerate(order) if f == "A"} == {"instance_0"}
    assert {placed[i] for i, f in enumerate(order) if f == "B"} == {"instance_1"}
    # Round-robin splits both families over both instances ...
    rr_placed = list(rr.requests.instance)
    assert {rr_placed[i] for i, f in enumerate(order) if f == "A"} == {"instance_0",
                                                                       "instance_1"}
    # ... so it recomputes each prefix on both, and hits the cache less.
    assert affinity.summary["cache_hit_rate"] > rr.summary["cache_hit_rate"]
    assert affinity.requests.cached_tokens.sum() > rr.requests.cached_tokens.sum()
    # every request after its family's first reuses the whole 256-token prefix
    assert affinity.requests.cached_tokens.sum() == 6 * 256


# -- scheduling order -------------------------------------------------------------------------

def queued_behind_a_long_request():
    """request_0 occupies the only running slot; requests 1..3 (prompts 300, 50, 600 tokens)
    arrive in that order and wait together."""
    return [(0.0, tokens(1000, 1), 40), (0.01, tokens(300, 5000), 3),
            (0.02, tokens(50, 9000), 3), (0.03, tokens(600, 12000), 3)]


@pytest.mark.parametrize(("scheduler", "priority", "served"), [
    ("fcfs", "constant", [1, 2, 3]),
    ("sjf", "constant", [2, 1, 3]),  # shortest prompt first
    ("priority-fcfs", "slo-based", [1, 2, 3]),  # oldest (highest age score) first
    ("priority-fcfs", "inverted-slo", [3, 2, 1]),  # newest first
    ("reverse-priority", "slo-based", [3, 2, 1]),  # lowest age score: newest first
    ("reverse-priority", "constant", [1, 2, 3]),  # all equal: arrival order
    ("priority-fcfs", "deadline-aware", [1, 2, 3]),  # earliest deadline first
])
def test_scheduler_serves_the_waiting_requests_in_its_order(tmp_path, scheduler, priority,
                                                            served):
    result = run(tmp_path, queued_behind_a_long_request(),
                 engine={"max_running_requests": 1},
                 policies=policies(scheduler=scheduler, priority=priority))
    reqs = result.requests
    assert reqs.scheduled_s[0] < reqs.scheduled_s[1:].min()
    assert list(reqs.scheduled_s[1:].sort_values().index) == served
    assert list(reqs.ttft_ms[1:].sort_values().index) == served
    assert (reqs.final_state == "completed").all()


# -- admission ------------------------------------------------------------------------------

def test_token_bucket_rejects_what_the_bucket_cannot_pay_for(tmp_path):
    # capacity 500: two 200-token prompts at t=0 fit, three do not; 0.2 s later the bucket
    # holds 100 + 200 (refill 1000/s), enough for one more.
    rows = [*burst(5, length=200), (0.2, tokens(200, 90_000), 4)]
    result = run(tmp_path, rows, policies=policies(admission=("token-bucket",
                                                              {"capacity": 500})))
    reqs = result.requests
    assert list(reqs.final_state) == ["completed", "completed", "rejected", "rejected",
                                      "rejected", "completed"]
    assert list(reqs.reject_reason[2:5]) == ["insufficient tokens"] * 3
    assert list(reqs.instance[2:5]) == [""] * 3
    assert result.summary["rejected_requests"] == 3
    assert result.summary["completed_requests"] == 3


def test_reject_all_rejects_everything(tmp_path):
    result = run(tmp_path, burst(5), cluster={"instances": 2},
                 policies=policies(admission="reject-all"))
    assert result.summary["completed_requests"] == 0
    assert result.summary["rejected_requests"] == 5
    assert set(result.requests.final_state) == {"rejected"}
    assert set(result.requests.reject_reason) == {"reject-all"}
    assert set(result.requests.instance) == {""}


def test_rate_limit_delay_admits_everything_one_window_apart(tmp_path):
    result = run(tmp_path, burst(3, length=100), policies=policies(
        admission=("rate-limit", {"max_requests": 1, "window_s": 0.1, "on_limit": "delay"})))
    reqs = result.requests
    assert (reqs.final_state == "completed").all()
    assert result.summary["rejected_requests"] == 0
    # Same prompt length, same queueing delay: each admission is one window after the last.
    waited = reqs.queued_s - reqs.arrival_s
    assert waited[1] - waited[0] == pytest.approx(0.1, abs=1e-9)
    assert waited[2] - waited[0] == pytest.approx(0.2, abs=1e-9)
    assert reqs.scheduled_s[1] >= 0.1
    assert reqs.scheduled_s[2] >= 0.2


def test_rate_limit_reject_turns_the_excess_away(tmp_path):
    result = run(tmp_path, [*burst(3, length=100), (0.2, tokens(100, 70_000), 4)],
                 policies=policies(admission=("rate-limit", {"max_requests": 1,
                                                             "window_s": 0.1})))
    reqs = result.requests
    assert list(reqs.final_state) == ["completed", "rejected", "rejected", "completed"]
    assert list(reqs.reject_reason[1:3]) == ["rate limit"] * 2


def test_tenant_quota_counts_active_requests_and_frees_them_on_completion(tmp_path):
    # Trace rows have no tenant: everyone is tenant "", limited by default_quota.
    rows = [*burst(3), (1.0, tokens(64, 80_000), 4)]
    result = run(tmp_path, rows, policies=policies(admission=("tenant-quota",
                                                              {"default_quota": 1})))
    reqs = result.requests
    assert list(reqs.final_state) == ["completed", "rejected", "rejected", "completed"]
    assert list(reqs.reject_reason[1:3]) == ["tenant '' quota 1"] * 2


# -- preemption -----------------------------------------------------------------------------

def user_priority(tmp_path: Path, monkeypatch, source: str) -> str:
    name = f"behaviour_priority_{next(_modules)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


PRIORITIES = """
    from blis_simpy.policies.priority import PriorityPolicy

    class ByLength(PriorityPolicy):
        ages = False

        def compute(self, req, state, clock):
            return float(req.input_tokens)

    class ByArrival(PriorityPolicy):
        '''Ranks requests exactly as inverted-slo does at any one instant, without aging.'''
        ages = False

        def compute(self, req, state, clock):
            return req.arrival_us * 1e-6
"""


def kv_pressure():
    """Three requests that fit alone but not together in 12 blocks of 16 tokens: decoding
    grows them until one must be preempted. Prompts 48, 32 and 40 tokens."""
    return [(0.0, tokens(48, 1), 60), (0.001, tokens(32, 5000), 60),
            (0.002, tokens(40, 9000), 60)]


def first_victims(tmp_path, monkeypatch, **changes):
    """Run; each preemption victim, in order, from the recorded events, and the result."""
    trace = write_trace(tmp_path / "kv.csv", kv_pressure())
    result = simulate_scenario(trace_run_scenario(trace, engine={"kv_blocks": 12}, **changes),
                               recorder=Recorder(events=True))
    assert result.events is not None
    return [name for _, kind, name, _ in result.events if kind == "preempted"], result


def test_lowest_priority_preempts_a_different_victim_than_lifo(tmp_path, monkeypatch):
    module = user_priority(tmp_path, monkeypatch, PRIORITIES)
    lifo_victims, lifo = first_victims(tmp_path, monkeypatch, policies=policies(
        priority=f"{module}:ByLength", scheduler=("fcfs", {"preemption": "lifo"})))
    low_victims, low = first_victims(tmp_path, monkeypatch, policies=policies(
        priority=f"{module}:ByLength", scheduler=("fcfs", {"preemption": "lowest-priority"})))
    # The first preemption chooses between request_1 (32 tokens) and request_2 (40 tokens,
    # admitted last): lifo takes the last, lowest-priority the shorter prompt.
    assert lifo_victims[0] == "request_2"
    assert low_victims[0] == "request_1"
    assert lifo.requests.preemptions.sum() > 0 and low.requests.preemptions.sum() > 0
    assert list(lifo.requests.completion_s) != list(low.requests.completion_s)
    assert (low.requests.final_state == "completed").all()


def test_lowest_priority_victim_uses_current_priorities_of_an_aging_policy(tmp_path,
                                                                          monkeypatch):
    """inverted-slo scores -(age): at any instant the oldest request has the lowest score, so
    the lowest-priority victim must be the oldest candidate, the same victim a time-invariant
    policy with the same ranking (ByArrival) picks."""
    module = user_priority(tmp_path, monkeypatch, PRIORITIES)
    lowest = ("fcfs", {"preemption": "lowest-priority"})
    reference, _ = first_victims(tmp_path, monkeypatch, policies=policies(
        priority=f"{module}:ByArrival", scheduler=lowest))
    assert reference[0] == "request_1"  # request_1 (t=1 ms) is older than request_2 (t=2 ms)
    aging, _ = first_victims(tmp_path, monkeypatch, policies=policies(
        priority="inverted-slo", scheduler=lowest))
    assert aging == reference, (
        "lowest-priority victims under an aging priority must be chosen on priorities "
        "rescored at the preemption instant (blis_simpy/engine/instance.py Instance._reserve), "
        "not on the stale scores from gateway admission or the last wait-queue sort; "
        f"victims {aging} != expected {reference}")
