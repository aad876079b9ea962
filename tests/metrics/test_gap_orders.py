"""A summary sorts each instance's step durations once (`gaps.duration_orders`) and every scope's
inter-token gap samples are built from them (`TokenGaps.orders`): the samples must be the
same multiset as in step order, so every order statistic, count and exact sum the summary and
vLLM's block read is the same, in native and compat reporting."""

from __future__ import annotations

import pytest

from blis_simpy.metrics.conventions import step_durations
from blis_simpy.metrics.gaps import duration_orders
from blis_simpy.metrics.serving import squares
from blis_simpy.metrics.summary import Samples
from blis_simpy.metrics.tables import scope_figures
from blis_simpy.metrics.window import Window
from blis_simpy.sim.build import build
from tests.conftest import scenario

RANKS = [p / 4 for p in range(401)]  # every quarter percentile


def same(a: Samples, b: Samples) -> None:
    assert (a.count, a.total, squares(a)) == (b.count, b.total, squares(b))
    assert [a.percentile_ms(p) for p in RANKS] == [b.percentile_ms(p) for p in RANKS]


@pytest.mark.parametrize("compat", [None, "blis"])
def test_gap_samples_from_sorted_steps_are_those_in_step_order(compat):
    changes = {} if compat is None else {"compat": compat}
    sim = build(scenario(cluster={"instances": 3},
                         workload={"num_requests": 240, "rate_per_s": 60}, **changes))
    sim.run(None)
    records, conventions = sim.records(), sim.conventions
    lat = conventions.latencies(records.requests, step_durations(records.instances))
    window = Window.of(sim.scenario.evaluation.window)
    orders = duration_orders(records.instances)
    for members in ([0, 1, 2], [0], [2]):
        plain = scope_figures(records, lat, conventions, members, window, None)
        ordered = scope_figures(records, lat, conventions, members, window, None, orders)
        assert plain.itl.count > 100
        same(plain.itl, ordered.itl)
        if plain.serving is not None:
            assert ordered.serving is not None
            same(plain.serving.itl, ordered.serving.itl)
            assert plain.serving.breakdown == ordered.serving.breakdown
            assert plain.serving.squares == ordered.serving.squares
