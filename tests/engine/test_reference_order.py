"""The reference's instance event heap: equal timestamps pop in Go container/heap order.

Vectors from scripts/gen_go_heap_vectors.go (random pushes and pops over a few timestamps,
so most comparisons tie); CI has no Go toolchain, so they are checked in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blis_simpy.api import prepare, simulate
from blis_simpy.engine.reference_order import TimestampHeap
from tests.conftest import scenario

CASES = json.loads((Path(__file__).parent / "data" / "go_heap_vectors.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_pop_order_equals_go_container_heap(case):
    heap = TimestampHeap()
    popped = []
    for op in case["ops"]:
        if op:
            heap.push(op[0], 0, op[1])
        else:
            popped.append(heap.pop()[2])
    assert popped == case["popped"]


def test_vectors_are_mostly_ties_and_not_fifo():
    """The vectors would catch a FIFO (or LIFO) tie-break: some pop order differs from both."""
    def tie_order(case, reverse):
        heap, clock_ops = [], []
        for op in case["ops"]:
            if op:
                heap.append((op[0], -op[1] if reverse else op[1]))
            else:
                heap.sort()
                clock_ops.append(abs(heap.pop(0)[1]))
        return clock_ops
    assert any(case["popped"] != tie_order(case, False) for case in CASES)
    assert any(case["popped"] != tie_order(case, True) for case in CASES)


def test_queued_event_pushed_after_a_step_can_pop_before_it():
    """The pattern behind the long-run divergence: a step pushes a request-left event and its
    successor for time 5; a request's queued event for time 5 is pushed later. Popping the
    request-left event moves the queued event to the root, ahead of the step."""
    heap = TimestampHeap()
    heap.push(5, 0, "request left")
    heap.push(5, 0, "step")
    heap.push(5, 0, "queued")
    assert [heap.pop()[2] for _ in range(3)] == ["request left", "queued", "step"]


def test_q2_a_preemption_that_empties_the_batch_does_not_strand_the_queue():
    """A compat step whose only running request preempts itself runs nothing and leaves the
    batch empty with that request waiting. The instance steps again at once rather than go
    idle with a queue: every request completes or is rejected, nothing is left queued.
    (Found by the cluster invariants; before the fix request_24 stayed queued forever.)"""
    result = simulate(prepare(scenario(
        compat="blis", seed=731260805, cluster={"instances": 2},
        engine={"kv_blocks": 8, "block_size": 16, "max_running_requests": 2,
                "max_scheduled_tokens": 16},
        policies={"routing": {"type": "round-robin"},
                  "scheduler": {"type": "sjf", "params": {"preemption": "lifo"}}},
        workload={"type": "distribution", "num_requests": 33, "rate_per_s": 80,
                  "prefix_tokens": 40, "arrival": "constant",
                  "prompt": {"mean": 60, "stdev": 40, "min": 1, "max": 250},
                  "output": {"mean": 40, "stdev": 30, "min": 1, "max": 150}}), checks=True))
    states = result.requests.final_state
    assert result.requests.preemptions.sum() > 0
    assert set(states) == {"completed", "rejected"}, states.value_counts().to_dict()
    assert result.summary["still_queued"] == 0
