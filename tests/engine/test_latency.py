"""Step-time adapters: what the engine hands the latency models."""

from __future__ import annotations

import numpy as np

from blis_simpy.core.request import Request
from blis_simpy.engine.instance import DECODE
from blis_simpy.engine.latency import BlackboxLatency, RooflineLatency


class Recording:
    def __init__(self):
        self.calls = []

    def step_time(self, prefills, decodes):
        self.calls.append((list(prefills), list(decodes)))
        return 1


def test_blackbox_truncates_like_go_int64():
    latency = BlackboxLatency([100.9, 0.5, 7.99], [1000.7, 2.5, 0.3])
    assert latency.queue_delay(3) == 102  # 100.9 + 1.5 = 102.4
    assert latency.output_delay == 7
    assert latency.step_time(3, 2, [], 0) == 1008  # 1000.7 + 7.5 + 0.6 = 1008.8


def test_roofline_sees_cached_context_as_prefill_start():
    """A request admitted with 64 cached tokens prefills from position 64 (the reference
    passes 0, ignoring the cached context's attention cost)."""
    model = Recording()
    latency = RooflineLatency([0, 0, 0], model)  # type: ignore[arg-type]
    cached = Request(0, 0, np.arange(100), np.arange(5))
    cached.progress, cached.chunk = 64, 36
    decoding = Request(1, 0, np.arange(10), np.arange(5))
    decoding.progress, decoding.chunk = 12, DECODE
    latency.step_time(36, 1, [cached, decoding], 0)
    assert model.calls == [([(64, 36)], [12])]


def test_extra_step_time_is_added_as_is():
    """The step-time input for time spent beyond compute (KV loads, warm-up): zero today,
    added unchanged by every model."""
    latency = BlackboxLatency([0, 0, 0], [1000.7, 2.5, 0.3])
    assert latency.step_time(3, 2, [], 250) == latency.step_time(3, 2, [], 0) + 250
