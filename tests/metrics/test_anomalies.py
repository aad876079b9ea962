"""Anomalies (`Result.anomalies`, anomalies.csv; counts in `metrics["anomalies"]`): each type
triggered in a minimal scenario and not triggered in its near twin.

Definitions (blis_simpy/engine/anomalies.py while running; metrics/anomalies.py at the end):
* priority_inversion (seed D.8): at an instance step, a request is admitted from the wait
  queue while a request with a strictly higher priority (as the priority policy assigned it,
  at that time) stays waiting in the same queue. Recorded once per admitted request, naming
  (admitted, highest-priority waiting).
* hol_blocking (seed D.8): ... and that higher-priority request had queued before the admitted
  one: it was ahead in line and a lower-priority request behind it was served. One episode per
  passed-over request (the waiting request queued first among those), from the first step it
  is passed over to the step it is admitted (or the end of the run), naming (it, the requests
  served past it at that first step).
* slo_class_inversion: the same judgement by SLO class instead of priority: a request admitted
  while one of a strictly more urgent SLO class waits. Urgency = the class's rank, smaller =
  more urgent; ranks default to realtime/critical 0, interactive/standard 1, "" (and unknown
  classes) 2, batch/sheddable 3, background 4, and `evaluation.class_ranks` overrides them.
  The same class is never an inversion (arrival order within a class is the scheduler's
  business), so a run with one class has none. Naming (admitted, most urgent waiting).
* kv_hol_blocking: the queue head cannot be admitted for lack of free KV blocks while a
  request behind it (within the next 32) would fit. One episode per blocked head, from the
  first step it is seen to the step it stops being the head (admitted, or another request put
  before it) or the end of the run, naming (head, the first request behind it that fit then).
  The detail says at how many steps it was seen (the count of the old one-row-per-step form).
* slo_violation: a completed request whose TTFT / TPOT (itl_mean_ms) / E2E exceeds its targets
  (the tenant's own `slo`, else `evaluation.slo_targets[class]`); one record per request, at
  its completion, the detail listing each missed target.
* preemption_storm: >= `evaluation.preemption_storm.count` preemptions on one instance within
  `window_s` (first to last event strictly less than the window apart);
* rejection_burst: the same over rejections (admission or instance) cluster-wide.
  Both cluster greedily scanning forward: a cluster starts at the first event that has
  count-1 more within the window, takes every event within the window of its start, and the
  scan resumes after it (each event in at most one cluster).

Expected times are computed from the engine's formulas with the conftest coefficients (see
test_raw_metrics.py): queueing delay int(a0 + a1*len), step int(b0 + b1*new + b2*decodes),
first token at the prefill step's end + int(a2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blis_simpy.api import run
from blis_simpy.config.scenario import DEFAULT_CLASS_RANKS, Burst, EvaluationConfig, Scenario
from blis_simpy.core.records import ANOMALY_TYPES, Recorder
from blis_simpy.metrics.anomalies import bursts, judged
from blis_simpy.metrics.columns import Table
from blis_simpy.sim.result import Result
from tests.conftest import (
    LLAMA_ALPHA,
    LLAMA_BETA,
    tenant,
    tenants_scenario,
    trace_run_scenario,
    write_trace,
)

A0, A1, A2 = LLAMA_ALPHA
B0, B1, B2 = LLAMA_BETA
OUT_DELAY = int(A2)


def queue_delay(length: int) -> int:
    return int(A0 + A1 * length)


def step(new_tokens: int, decodes: int) -> int:
    return int(B0 + B1 * new_tokens + B2 * decodes)


def tokens(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def of_type(result: Result, kind: str) -> pd.DataFrame:
    assert result.anomalies is not None
    return result.anomalies[result.anomalies.type == kind].reset_index(drop=True)


def count(result: Result, kind: str) -> int:
    return result.metrics["anomalies"].get(kind, 0)


# --- the burst clustering and the end-of-run judgement --------------------------------------


def events(times: list[int], instance: str = "instance_0") -> list[tuple[int, str, str]]:
    return [(t, instance, f"r{i}") for i, t in enumerate(times)]


def test_bursts_cluster_greedily_forward():
    found = bursts(events([0, 1, 2, 3, 20, 21, 22, 40]), count=3, window_us=10)
    assert found == [(0, 3, ["r0", "r1", "r2", "r3"]), (20, 22, ["r4", "r5", "r6"])]


def test_bursts_window_is_strict_and_count_is_a_minimum():
    assert bursts(events([0, 5, 10]), count=3, window_us=10) == []  # span 10 is not < 10
    assert bursts(events([0, 5, 9]), count=3, window_us=10) == [(0, 9, ["r0", "r1", "r2"])]
    assert bursts(events([0, 5]), count=3, window_us=100) == []
    # A sparse start does not hide a later cluster.
    assert bursts(events([0, 50, 51, 52]), count=3, window_us=10) == [
        (50, 52, ["r1", "r2", "r3"])]


@given(st.lists(st.integers(0, 1000), max_size=40), st.integers(2, 6), st.integers(1, 200))
def test_bursts_are_disjoint_dense_clusters(times, n, window):
    evs = events(sorted(times))
    found = bursts(evs, n, window)
    seen: list[str] = []
    for start, end, reqs in found:
        assert len(reqs) >= n
        assert end - start < window
        seen.extend(reqs)
    assert len(seen) == len(set(seen))


def empty_requests() -> Table:
    return Table({name: [] for name in ("id", "final_state", "completion_s", "instance",
                                        "ttft_ms", "itl_mean_ms", "e2e_ms")})


def judge(preemptions, rejections, storm: int, burst: int):
    """The end-of-run judgement over hand-made records (windows of 100 µs)."""
    recorder = Recorder()
    recorder.preemptions, recorder.rejections = preemptions, rejections
    config = EvaluationConfig(preemption_storm=Burst(storm, 1e-4),
                              rejection_burst=Burst(burst, 1e-4))
    return judged(recorder.close(0), empty_requests(), [], config)


def test_storms_are_per_instance_and_bursts_cluster_wide():
    """Four preemptions alternating between two instances are two per instance; rejections
    by the gateway ("") and by an instance form one cluster-wide burst."""
    preemptions = [(0, "instance_0", "a"), (1, "instance_1", "b"),
                   (2, "instance_0", "c"), (3, "instance_1", "d")]
    rejections = [(5, "", "x"), (6, "instance_1", "y"), (7, "", "z")]
    found = judge(preemptions, rejections, 3, 3)
    assert [(a.type, a.instance, a.requests) for a in found] == [
        ("rejection_burst", "", ("x", "y", "z"))]
    found = judge(preemptions, [], 2, 3)
    assert [(a.type, a.time, a.instance, a.requests) for a in found] == [
        ("preemption_storm", 0, "instance_0", ("a", "c")),
        ("preemption_storm", 1, "instance_1", ("b", "d"))]


def test_class_ranks_and_anomaly_types():
    ranks = EvaluationConfig().ranks()
    assert ranks["realtime"] == 0 and ranks["batch"] == 3
    assert ranks[""] == DEFAULT_CLASS_RANKS[""] == 2
    custom = EvaluationConfig(class_ranks={"gold": 0, "": 9}).ranks()
    assert custom["gold"] == 0 and custom[""] == custom["default"] == 9
    assert custom["realtime"] == 0  # the defaults stay
    with pytest.raises(ValueError, match="unknown anomaly type"):
        Recorder().anomaly("made_up", 0, "", [])
    assert set(ANOMALY_TYPES) >= {"priority_inversion", "hol_blocking", "slo_class_inversion",
                                  "kv_hol_blocking", "slo_violation", "preemption_storm",
                                  "rejection_burst"}


# --- priority inversion ---------------------------------------------------------------------

SLO_PRIORITY = {"type": "slo-based",
                "params": {"class_scores": {"realtime": 10, "batch": 0}}}


def batch_before_realtime(**changes: Any) -> Scenario:
    """max_running_requests=1. A blocker (interactive, 32 tokens, 20 output) arrives at 0 and
    runs alone; a batch request arrives at 0.01 s and a realtime one at 0.02 s, both queueing
    behind it. When the blocker completes, one of them is admitted while the other waits."""
    return tenants_scenario([
        tenant("blocker", "interactive", 1, "constant", 32, 20),
        tenant("bulk", "batch", 50, "periodic", 64, 4),
        tenant("rt", "realtime", 25, "periodic", 64, 4),
    ], rate_per_s=76, duration_s=0.025, engine={"max_running_requests": 1}, **changes)


BLOCKER_DONE_US = queue_delay(32) + step(32, 0) + 19 * step(0, 1)  # 115994


def test_priority_inversion_is_judged_on_the_assigned_priorities():
    """With one priority for everyone (the constant policy) nothing is ever served before a
    higher-priority request: no priority inversion, whatever the SLO classes; the SLO view
    still sees the batch request served before the waiting realtime one."""
    result = run(batch_before_realtime(policies={"priority": {"type": "constant"},
                                                 "scheduler": {"type": "fcfs"}}))
    assert count(result, "priority_inversion") == 0 == count(result, "hol_blocking")
    assert count(result, "slo_class_inversion") == 1
    assert of_type(result, "slo_class_inversion").requests[0] == "request_1;request_2"


def test_mixed_slo_with_constant_priority_has_no_priority_inversion():
    """The library's mixed-slo scenario with one priority for all and FCFS: it used to log
    over a thousand priority inversions, all of them SLO-class judgements."""
    s = Scenario.from_yaml(Path(__file__).parents[2] / "scenarios" / "mixed-slo.yaml",
                           {"policies.priority": {"type": "constant"},
                            "policies.scheduler": {"type": "fcfs"}})
    result = run(s)
    assert count(result, "priority_inversion") == 0 == count(result, "hol_blocking")
    assert count(result, "slo_class_inversion") > 100


def test_fcfs_admits_batch_before_waiting_realtime_with_slo_priorities():
    """FCFS ignores priorities: the batch request (queued first) is admitted while the
    higher-priority realtime one waits: one inversion, at the blocker's completion. Not
    head-of-line blocking in the seed's sense: the realtime request queued after it."""
    result = run(batch_before_realtime(policies={"priority": SLO_PRIORITY,
                                                 "scheduler": {"type": "fcfs"}}))
    req = result.requests.set_index("id")
    assert list(req.slo_class) == ["interactive", "batch", "realtime"]
    assert count(result, "hol_blocking") == 0
    assert count(result, "slo_class_inversion") == 1
    inversions = of_type(result, "priority_inversion")
    assert len(inversions) == 1 == count(result, "priority_inversion")
    row = inversions.iloc[0]
    assert row.requests == "request_1;request_2"  # admitted batch; waiting realtime
    assert row.instance == "instance_0"
    assert row.time_s == pytest.approx(BLOCKER_DONE_US / 1e6)
    assert req.scheduled_s["request_1"] == pytest.approx(BLOCKER_DONE_US / 1e6)
    assert "request_2" in row.detail


def test_slo_priority_with_priority_fcfs_has_no_inversion():
    result = run(batch_before_realtime(policies={"priority": SLO_PRIORITY,
                                                 "scheduler": {"type": "priority-fcfs"}}))
    req = result.requests.set_index("id")
    assert req.scheduled_s["request_2"] == pytest.approx(BLOCKER_DONE_US / 1e6)  # rt first
    assert count(result, "priority_inversion") == 0 == count(result, "slo_class_inversion")
    assert of_type(result, "priority_inversion").empty


def passed_over(scheduler: str) -> Scenario:
    """max_running_requests=1 behind a blocker: a long high-priority request queues first, a
    short low-priority one after it (tenant-priority: long 5, short 1)."""
    return tenants_scenario([
        tenant("blocker", "", 1, "constant", 32, 20),
        tenant("long", "", 50, "periodic", 512, 4),
        tenant("short", "", 25, "periodic", 64, 4),
    ], rate_per_s=76, duration_s=0.025, engine={"max_running_requests": 1},
        policies={"priority": {"type": "tenant-priority",
                               "params": {"tenants": {"long": 5, "short": 1}}},
                  "scheduler": {"type": scheduler}})


def test_hol_blocking_when_a_lower_priority_request_behind_is_served_first():
    """Shortest-job-first serves the short, lower-priority request that queued behind the
    long one: the long one is blocked at the head of the line (seed D.8), and that is also a
    priority inversion. The episode lasts from the short one's admission to the long one's."""
    result = run(passed_over("sjf"))
    req = result.requests.set_index("tenant")
    assert req.queued_s["long"] < req.queued_s["short"]
    assert req.scheduled_s["short"] < req.scheduled_s["long"]
    hol = of_type(result, "hol_blocking")
    assert hol.requests.tolist() == [f"{req.id['long']};{req.id['short']}"]
    assert hol.time_s[0] == pytest.approx(req.scheduled_s["short"])
    assert hol.end_s[0] == pytest.approx(req.scheduled_s["long"])
    assert hol.duration_s[0] == pytest.approx(hol.end_s[0] - hol.time_s[0])
    assert hol.duration_s[0] > 0
    assert "by 1 lower-priority requests" in hol.detail[0] and "at 1 steps" in hol.detail[0]
    assert of_type(result, "priority_inversion").requests.tolist() == [
        f"{req.id['short']};{req.id['long']}"]
    # FCFS serves them in line: neither anomaly.
    fcfs = run(passed_over("fcfs"))
    assert count(fcfs, "hol_blocking") == 0 == count(fcfs, "priority_inversion")


def test_hol_blocking_is_one_episode_however_often_the_request_is_passed_over():
    """Reverse-priority admits the lowest priority first, one at a time: the long request
    (priority 5) is passed over by each of three short ones (priority 1), at three steps:
    one episode, ending when it is finally admitted."""
    result = run(tenants_scenario([
        tenant("blocker", "", 1, "constant", 32, 20),
        tenant("long", "", 1, "constant", 512, 4),  # at 0, queued after the blocker
        tenant("short", "", 150, "periodic", 64, 4),  # at 1/300, 3/300, 5/300 s
    ], rate_per_s=152, duration_s=0.02, engine={"max_running_requests": 1},
        policies={"priority": {"type": "tenant-priority",
                               "params": {"tenants": {"long": 5, "short": 1}}},
                  "scheduler": {"type": "reverse-priority"}}))
    req = result.requests
    long = req[req.tenant == "long"].iloc[0]
    shorts = req[(req.tenant == "short") & (req.queued_s > long.queued_s)]
    assert len(shorts) == 3 and (shorts.scheduled_s < long.scheduled_s).all()
    hol = of_type(result, "hol_blocking")
    assert len(hol) == 1 == count(result, "hol_blocking")
    row = hol.iloc[0]
    assert row.requests.split(";")[0] == long.id
    assert row.time_s == pytest.approx(shorts.scheduled_s.min())
    assert row.end_s == pytest.approx(long.scheduled_s)
    assert "by 3 lower-priority requests" in row.detail and "at 3 steps" in row.detail
    assert count(result, "priority_inversion") == 3  # one per admission: still instants


def same_arrival(**changes: Any) -> Scenario:
    """max_running_requests=1; three tenants arrive together at t=0: a blocker (class
    silver, 16 tokens, queued first), `s` (silver, 32 tokens) and `g` (gold, 64 tokens),
    queued in that order (shorter prompts have shorter queueing delays). After the blocker,
    s is admitted while g waits; both arrived at 0."""
    return tenants_scenario([
        tenant("blocker", "silver", 1, "constant", 16, 10),
        tenant("s", "silver", 1, "constant", 32, 2),
        tenant("g", "gold", 1, "constant", 64, 2),
    ], rate_per_s=3, duration_s=0.5, engine={"max_running_requests": 1}, **changes)


def test_equal_urgency_is_never_an_inversion():
    """gold and silver are not ranked: both rank with "" (2), arrival 0: equal urgency."""
    result = run(same_arrival())
    req = result.requests.set_index("tenant")
    assert req.scheduled_s["s"] < req.scheduled_s["g"]
    assert count(result, "slo_class_inversion") == 0


@pytest.mark.parametrize(("ranks", "inversions"), [
    ({"gold": 0}, 1),  # gold more urgent: s admitted while g waits
    ({"gold": 5}, 0),  # gold less urgent than silver (2): no inversion
    ({"silver": 0, "gold": 1}, 0),
])
def test_class_ranks_override_the_defaults(ranks, inversions):
    result = run(same_arrival(evaluation={"class_ranks": ranks}))
    assert count(result, "slo_class_inversion") == inversions
    if inversions:
        req = result.requests.set_index("tenant")
        assert of_type(result, "slo_class_inversion").requests[0] == \
            f"{req.id['s']};{req.id['g']}"


def same_class_trace(tmp_path: Path, scheduler: str) -> Scenario:
    """One class (""), max_running_requests=1: a blocker at 0, a 512-token request at 0.01 s,
    a 64-token one at 0.02 s."""
    rows = [(0.0, tokens(100, 32), 20), (0.01, tokens(1000, 512), 2),
            (0.02, tokens(5000, 64), 2)]
    return trace_run_scenario(write_trace(tmp_path / "t.csv", rows),
                              engine={"max_running_requests": 1},
                              policies={"scheduler": {"type": scheduler}})


def test_one_slo_class_has_no_slo_class_inversion(tmp_path: Path):
    """Shortest-job-first admits the later, shorter request while the earlier one waits: the
    same SLO class, so no SLO-class inversion (issue 31: a one-class run reported them, and
    advice about urgent classes it does not have)."""
    sjf = run(same_class_trace(tmp_path, "sjf"))
    assert sjf.requests.set_index("id").scheduled_s["request_2"] < \
        sjf.requests.set_index("id").scheduled_s["request_1"]  # served out of arrival order
    assert count(sjf, "slo_class_inversion") == 0
    assert count(sjf, "priority_inversion") == 0  # one priority for all
    assert "urgent" not in sjf.summary_text()


# --- head-of-line blocking ------------------------------------------------------------------


def hol_trace(tmp_path: Path, behind_len: int) -> Path:
    """KV cache of 20 blocks (320 tokens). request_0 (160 tokens, 50 output) holds 10-14
    blocks for ~0.3 s; request_1 (200 tokens: 13 blocks) arrives at 1 ms and cannot fit;
    request_2 (`behind_len` tokens) arrives at 2 ms behind it."""
    return write_trace(tmp_path / "h.csv", [(0.0, tokens(1000, 160), 50),
                                            (0.001, tokens(2000, 200), 10),
                                            (0.002, tokens(3000, behind_len), 5)])


def test_kv_hol_blocking_when_a_short_request_waits_behind_a_long_head(tmp_path: Path):
    """One episode: from the first step after request_2 joins the queue (it fits, the head
    does not) to the step that admits the head, request_1, once request_0 has finished;
    seen at every step in between."""
    result = run(trace_run_scenario(hol_trace(tmp_path, 32), engine={"kv_blocks": 20}))
    hol = of_type(result, "kv_hol_blocking")
    assert len(hol) == 1 == count(result, "kv_hol_blocking")
    row = hol.iloc[0]
    assert row.requests == "request_1;request_2"
    assert row.instance == "instance_0"
    first = 2000 + queue_delay(32)
    last_end = result.requests.completion_s[0] * 1e6 - OUT_DELAY  # request_0's last step end
    start_us = result.steps.start_s * 1e6
    blocked = result.steps[(start_us >= first - 0.5) & (start_us < last_end - 0.5)]
    assert row.time_s == pytest.approx(blocked.start_s.min())
    req = result.requests
    assert row.end_s == pytest.approx(req.scheduled_s[1])  # the head's admission
    assert row.duration_s == pytest.approx(row.end_s - row.time_s)
    assert row.duration_s > 0.25
    assert f"at {len(blocked)} steps" in row.detail
    assert "still blocked" not in row.detail
    assert req.scheduled_s[2] >= req.scheduled_s[1]  # strict head-of-line order


def test_kv_hol_blocking_still_open_at_the_horizon_ends_with_the_run(tmp_path: Path):
    """A horizon before request_0 finishes: the head never gets in; its episode ends at the
    instance's last event (the start of its last step: that step's end is past the horizon)
    and says so."""
    result = run(trace_run_scenario(hol_trace(tmp_path, 32), engine={"kv_blocks": 20},
                                    horizon_s=0.1))
    hol = of_type(result, "kv_hol_blocking")
    assert len(hol) == 1
    assert hol.end_s[0] <= 0.1
    assert hol.end_s[0] == pytest.approx(result.steps.start_s.max())
    assert hol.detail[0].endswith("still blocked when the run ended")
    assert result.requests.final_state[1] != "completed"


def test_no_kv_hol_blocking_when_the_request_behind_does_not_fit_either(tmp_path: Path):
    """The near twin: request_2 needs 12 blocks (192 tokens), more than are ever free."""
    result = run(trace_run_scenario(hol_trace(tmp_path, 192), engine={"kv_blocks": 20}))
    assert count(result, "kv_hol_blocking") == 0
    assert result.metrics["completed"] == 3


def test_no_kv_hol_blocking_with_two_instances(tmp_path: Path):
    """Round-robin puts request_1 alone on instance_1, where it fits at once."""
    result = run(trace_run_scenario(hol_trace(tmp_path, 32), engine={"kv_blocks": 20},
                                    cluster={"instances": 2}))
    assert list(result.requests.instance) == ["instance_0", "instance_1", "instance_0"]
    assert count(result, "kv_hol_blocking") == 0


@pytest.mark.parametrize(("big_behind", "flagged"), [(31, True), (32, False)])
def test_kv_hol_lookahead_is_the_next_32_requests(tmp_path: Path, big_behind, flagged):
    """Head request_1 and `big_behind` more requests of 13 blocks queue behind request_0;
    a 2-block request comes last: at position 32 it is seen, at position 33 it is not
    (while request_1 is the head)."""
    rows = [(0.0, tokens(100_000, 160), 50)]
    rows += [(0.001 + i * 1e-5, tokens(200_000 + 1000 * i, 200), 10)
             for i in range(big_behind + 1)]
    rows += [(0.003, tokens(900_000, 32), 5)]
    result = run(trace_run_scenario(write_trace(tmp_path / "h.csv", rows),
                                    engine={"kv_blocks": 20}))
    small = f"request_{len(rows) - 1}"
    hol = of_type(result, "kv_hol_blocking")
    with_head_1 = hol[hol.requests.str.startswith("request_1;")]
    assert (f"request_1;{small}" in set(with_head_1.requests)) == flagged
    assert set(with_head_1.requests) <= {f"request_1;{small}"}


# --- preemption storms ----------------------------------------------------------------------


def storm_scenario(tmp_path: Path, kv_blocks: int, storm_count: int) -> Scenario:
    """Eight 64-token requests with 60 output tokens each, 1 ms apart, on one instance."""
    rows = [(0.001 * i, tokens(1000 * (i + 1), 64), 60) for i in range(8)]
    return trace_run_scenario(write_trace(tmp_path / "s.csv", rows),
                              engine={"kv_blocks": kv_blocks},
                              evaluation={"preemption_storm": {"count": storm_count,
                                                               "window_s": 1.0}})


def test_preemption_storm_with_a_tiny_kv_cache(tmp_path: Path):
    """24 blocks cannot hold eight growing requests (4-8 blocks each): they preempt each
    other, all within a second."""
    result = run(storm_scenario(tmp_path, 24, 3))
    preemptions = int(result.requests.preemptions.sum())
    assert preemptions >= 3
    storms = of_type(result, "preemption_storm")
    assert len(storms) == 1 == count(result, "preemption_storm")
    victims = storms.requests[0].split(";")
    assert len(victims) == preemptions  # all of them, within the window
    assert storms.instance[0] == "instance_0"
    assert storms.detail[0].startswith(f"{preemptions} preemptions in ")
    # A threshold above the number of preemptions: no storm.
    assert count(run(storm_scenario(tmp_path, 24, preemptions + 1)), "preemption_storm") == 0


def test_no_preemption_storm_with_room(tmp_path: Path):
    result = run(storm_scenario(tmp_path, 2000, 3))
    assert int(result.requests.preemptions.sum()) == 0
    assert count(result, "preemption_storm") == 0


# --- rejection bursts -----------------------------------------------------------------------


def bucket_scenario(tmp_path: Path, capacity: int, burst: dict[str, Any]) -> Scenario:
    """Ten requests 10 ms apart; a token bucket of `capacity` requests that never refills."""
    rows = [(0.01 * i, tokens(1000 * (i + 1), 64), 2) for i in range(10)]
    bucket = {"type": "token-bucket",
              "params": {"capacity": capacity, "refill_per_s": 0, "cost": "requests"}}
    return trace_run_scenario(write_trace(tmp_path / "b.csv", rows),
                              policies={"admission": bucket},
                              evaluation={"rejection_burst": burst})


def test_rejection_burst_from_a_token_bucket(tmp_path: Path):
    """Capacity 3: requests 3..9 are rejected at 0.03..0.09 s: 7 rejections in 0.06 s."""
    result = run(bucket_scenario(tmp_path, 3, {"count": 5, "window_s": 1.0}))
    bursts_ = of_type(result, "rejection_burst")
    assert len(bursts_) == 1
    row = bursts_.iloc[0]
    assert row.requests == ";".join(f"request_{i}" for i in range(3, 10))
    assert row.instance == ""  # cluster-wide
    assert row.time_s == pytest.approx(0.03)
    assert row.detail == "7 rejections in 0.060 s"


def test_rejection_burst_window_splits_greedily(tmp_path: Path):
    """Window 0.05 s: the first cluster takes 0.03..0.07 (0.08 is 0.05 s after its start);
    the two left over are fewer than 5."""
    result = run(bucket_scenario(tmp_path, 3, {"count": 5, "window_s": 0.05}))
    assert of_type(result, "rejection_burst").requests.tolist() == [
        ";".join(f"request_{i}" for i in range(3, 8))]


@pytest.mark.parametrize(("capacity", "burst"), [
    (100, {"count": 5, "window_s": 1.0}),  # nothing rejected
    (3, {"count": 8, "window_s": 1.0}),  # 7 rejections < 8
    (3, {"count": 5, "window_s": 0.04}),  # never 5 within 0.04 s (they are 0.01 s apart)
])
def test_no_rejection_burst(tmp_path: Path, capacity, burst):
    result = run(bucket_scenario(tmp_path, capacity, burst))
    assert count(result, "rejection_burst") == 0


def test_instance_rejections_make_bursts_too(tmp_path: Path):
    """Six requests longer than max_model_len, rejected by the instance on arrival."""
    rows = [(0.01 * i, tokens(1000 * (i + 1), 200), 2) for i in range(6)]
    s = trace_run_scenario(write_trace(tmp_path / "r.csv", rows),
                           engine={"max_model_len": 100},
                           evaluation={"rejection_burst": {"count": 5, "window_s": 1.0}})
    result = run(s)
    assert result.metrics["rejected"] == 6
    assert of_type(result, "rejection_burst").requests.tolist() == [
        ";".join(f"request_{i}" for i in range(6))]


# --- SLO violations -------------------------------------------------------------------------

ALONE_TTFT_US = queue_delay(64) + step(64, 0) + OUT_DELAY  # 10557


def single(slo: dict[str, float]) -> Scenario:
    """One request (64 tokens, 5 output) alone at t=0."""
    return tenants_scenario([tenant("t", "interactive", 1, "constant", 64, 5, slo=slo)],
                            rate_per_s=1, duration_s=0.5)


def test_slo_violation_names_the_request_and_the_missed_targets():
    result = run(single({"ttft_ms": 10.5, "tpot_ms": 5, "e2e_ms": 1000}))
    violations = of_type(result, "slo_violation")
    assert len(violations) == 1
    row = violations.iloc[0]
    assert row.requests == "request_0"
    assert row.instance == "instance_0"
    assert row.time_s == pytest.approx(result.requests.completion_s[0])
    assert row.detail == "ttft_ms 10.557 > 10.5; tpot_ms 5.758 > 5"
    assert ALONE_TTFT_US == 10_557


def test_no_slo_violation_when_every_target_holds():
    result = run(single({"ttft_ms": 10.6, "tpot_ms": 5.8, "e2e_ms": 34}))
    assert count(result, "slo_violation") == 0


def test_no_slo_violation_without_targets_or_when_rejected(tmp_path: Path):
    rows = [(0.0, tokens(100, 64), 2)]
    trace = write_trace(tmp_path / "t.csv", rows)
    assert count(run(trace_run_scenario(trace)), "slo_violation") == 0
    # A class target for the unnamed class applies to trace requests ...
    tight = {"slo_targets": {"": {"ttft_ms": 1}}}
    assert count(run(trace_run_scenario(trace, evaluation=tight)), "slo_violation") == 1
    # ... but a rejected request is not a violation (it lowers slo_attainment instead).
    rejected = run(trace_run_scenario(trace, evaluation=tight,
                                      policies={"admission": {"type": "reject-all"}}))
    assert count(rejected, "slo_violation") == 0


# --- the table ------------------------------------------------------------------------------


def test_anomaly_table_columns_order_and_counts(tmp_path: Path):
    result = run(storm_scenario(tmp_path, 24, 3))
    table = result.anomalies
    assert table is not None
    assert list(table.columns) == ["time_s", "end_s", "duration_s", "type", "instance",
                                   "requests", "detail", "severity"]
    assert table.time_s.is_monotonic_increasing
    assert (table.end_s >= table.time_s).all()
    assert (table.duration_s - (table.end_s - table.time_s)).abs().max() < 1e-9
    storms = table[table.type == "preemption_storm"]
    assert (storms.duration_s > 0).all()  # first to last preemption
    assert result.metrics["anomalies"] == table.type.value_counts().sort_index().to_dict()
    assert set(table.type) <= set(ANOMALY_TYPES)
