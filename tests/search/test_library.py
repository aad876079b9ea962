"""The search library (blis_simpy.search.library): on each axis's scenario the best built-in
template beats the worst by at least 20 % on the default score, on held-out seeds; the
pathological templates raise the anomalies the seeds name; and the default score orders
round-robin, least-loaded and prefix-affinity as their held-out latencies do.

Which templates are best and worst on each scenario was found running them all
(`separation(name)`, docs/guides/policy-search.md has the table); here the two are run on the five
held-out seeds, with the pathological one where it is not the worst.
"""

from __future__ import annotations

import pytest

from blis_simpy.config.library import library_names
from blis_simpy.search.library import SEARCH_LIBRARY, separation

BEST_WORST = {
    "search-admission": ("token-bucket", "batch-quota"),
    "search-priority": ("slo-based", "inverted-slo"),
    "search-routing": ("prefix-affinity", "always-busiest"),
    "search-scheduler": ("sjf", "reverse-priority"),
    "search-autoscale": ("target-utilization", "oscillator"),
    "search-pd": ("always", "never"),
    "search-kv-tiers": ("threshold-0.5", "threshold-1.0-fifo"),
}
# Templates the best must beat by 20 % too: on search-admission, admitting everything (the
# scenario's own policy), which a sustained overload makes late for most requests.
ALSO_BEATEN = {"search-admission": ("always-admit",)}
AXES = ("admission", "priority", "routing", "scheduler", "autoscale", "pd", "kv_tiers")
# Fewest anomalies of its kind a pathological template raises a run: one per occurrence,
# except scale_oscillation, one per flapping episode (judged from the scale log at the end of
# the run: the oscillator's flips are one long episode, its reversals in the severity).
MIN_COUNT = {"scale_oscillation": 1}


def test_every_axis_has_a_library_scenario_with_held_out_seeds():
    assert sorted(e.axis for e in SEARCH_LIBRARY.values()) == sorted(AXES)
    assert set(BEST_WORST) == set(SEARCH_LIBRARY)
    for name, entry in SEARCH_LIBRARY.items():
        assert name in library_names()
        assert not set(entry.train_seeds) & set(entry.held_out_seeds)
        assert len(entry.held_out_seeds) >= 5


@pytest.mark.parametrize("name", sorted(SEARCH_LIBRARY))
def test_best_template_beats_the_worst_by_20_percent_on_held_out_seeds(name):
    entry = SEARCH_LIBRARY[name]
    best, worst = BEST_WORST[name]
    also = ALSO_BEATEN.get(name, ())
    table = separation(name, templates=(best, worst, *also, *entry.pathological))
    for beaten in (worst, *also):
        assert table.loc[best, "fitness"] >= 1.2 * table.loc[beaten, "fitness"], table
    assert table.index[0] == best, table
    for template, kind in entry.pathological.items():
        count = table.loc[template, f"anomaly.{kind}"]  # a mean over the seeds
        assert count >= MIN_COUNT.get(kind, 5), table
        assert count > 2 * table.loc[best, f"anomaly.{kind}"], table


def test_default_score_orders_routing_templates_as_their_held_out_latencies():
    """Round-robin, least-loaded, prefix-affinity: the same order by the default score as by
    mean TTFT and by mean E2E latency (lower latency, higher score)."""
    table = separation("search-routing",
                       templates=("round-robin", "least-loaded", "prefix-affinity"))
    by_score = list(table.sort_values("fitness", ascending=False).index)
    assert by_score == list(table.sort_values("ttft_mean_ms").index)
    assert by_score == list(table.sort_values("e2e_mean_ms").index)
    assert by_score == ["prefix-affinity", "least-loaded", "round-robin"]
