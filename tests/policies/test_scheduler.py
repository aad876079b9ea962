"""Instance schedulers called directly: the wait-queue sort key and the preemption victim."""

from __future__ import annotations

import dataclasses

import pytest

from blis_simpy.core.errors import ScenarioError
from tests.policies.helpers import request, scheduler


def victim(policy, running):
    return policy.victim([r.view for r in running], [r.priority for r in running])


def order(name, reqs):
    key = scheduler(name).order_key
    return [r.name for r in sorted(reqs, key=lambda r: key(r.view, r.priority))]


def test_fcfs_has_no_sort_key_and_does_not_need_priorities():
    policy = scheduler("fcfs")
    assert policy.order_key is None
    assert policy.uses_priority is False


def test_priority_fcfs_orders_priority_desc_then_arrival_then_id_as_string():
    reqs = [request(0, arrival=5, priority=1.0), request(1, arrival=9, priority=3.0),
            request(2, arrival=7, priority=3.0), request(10, arrival=7, priority=3.0),
            request(3, arrival=0, priority=-1.0)]
    # request_10 < request_2 as strings
    assert order("priority-fcfs", reqs) == ["request_10", "request_2", "request_1",
                                            "request_0", "request_3"]
    assert scheduler("priority-fcfs").uses_priority is True


def test_sjf_orders_by_input_length_then_arrival_then_id():
    reqs = [request(0, arrival=0, input_len=50), request(1, arrival=1, input_len=10),
            request(2, arrival=3, input_len=20), request(10, arrival=3, input_len=20),
            request(4, arrival=2, input_len=20)]
    assert order("sjf", reqs) == ["request_1", "request_4", "request_10", "request_2",
                                  "request_0"]
    # priorities are ignored
    reqs[0].priority = 100.0
    assert order("sjf", reqs)[-1] == "request_0"
    assert scheduler("sjf").uses_priority is False


def test_schedulers_see_a_view_without_the_output_length():
    """Seed D.7: a scheduler observes priority, arrival and input tokens, never the future
    output length."""
    view = request(0).view
    assert view is not None
    assert not hasattr(view, "output_len") and not hasattr(view, "output_tokens")
    assert {"arrival_us", "input_tokens", "id"} <= {f.name for f in dataclasses.fields(view)}


def test_reverse_priority_orders_lowest_priority_first():
    reqs = [request(0, arrival=5, priority=1.0), request(1, arrival=9, priority=3.0),
            request(2, arrival=7, priority=-1.0), request(10, arrival=7, priority=-1.0),
            request(3, arrival=1, priority=-1.0)]
    assert order("reverse-priority", reqs) == ["request_3", "request_10", "request_2",
                                               "request_0", "request_1"]
    assert scheduler("reverse-priority").uses_priority is True


def test_lifo_victim_is_the_last_running_request():
    policy = scheduler("fcfs")
    assert policy.params.preemption == "lifo"
    running = [request(i, priority=p) for i, p in enumerate([5.0, -3.0, 2.0, 9.0])]
    assert victim(policy, running) == 3
    assert victim(policy, running[:1]) == 0


def test_lowest_priority_victim_is_the_lowest_then_the_last_of_equals():
    policy = scheduler("fcfs", preemption="lowest-priority")
    running = [request(i, priority=p) for i, p in enumerate([1.0, 0.0, 2.0, 0.0, 5.0])]
    assert victim(policy, running) == 3
    running[1].priority = -1.0
    assert victim(policy, running) == 1
    assert victim(policy, [request(0, priority=4.0)]) == 0


def test_lowest_priority_preemption_makes_any_scheduler_use_priorities():
    assert scheduler("fcfs", preemption="lowest-priority").uses_priority is True
    assert scheduler("sjf", preemption="lowest-priority").uses_priority is True
    assert scheduler("sjf").uses_priority is False


def test_bad_preemption_rule_names_its_path():
    with pytest.raises(ScenarioError) as err:
        scheduler("priority-fcfs", preemption="random")
    assert err.value.path == "policies.scheduler.params.preemption"
    assert "'lifo'" in str(err.value) and "'lowest-priority'" in str(err.value)
