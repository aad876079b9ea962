"""The default score's verdicts on the search library (newcomer 17's #1 and #2), through
run_many on held-out seeds: a load-blind random dropper (a code candidate rejecting one
request in k by a hash of its id) never beats the best honest template on search-admission,
search-priority and search-routing, nor does a bundle rejecting whenever more than 200
requests are in flight on the last two; running the maximum replicas always never beats the
best autoscaler on search-autoscale. And shedding pays where the load is more than the
replicas can carry: search-admission's sustained overload, where that in-flight cap beats
admitting everything. Two held-out seeds each, to keep the suite fast (the guide's table has
all five)."""

from __future__ import annotations

from typing import Any

import pytest

from blis_simpy.api import load
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.library import SEARCH_LIBRARY
from blis_simpy.search.sweep import run_many

SEEDS = (101, 102)


def dropper(k: int) -> CodePolicy:
    return CodePolicy("admission", f"""
class Policy(AdmissionPolicy):
    def decide(self, req, state, clock):
        s = 0
        for ch in str(req.id):
            s = (s * 31 + ord(ch)) % 1000003
        if s % {k} == 0:
            return AdmissionDecision("reject", "dice")
        return AdmissionDecision("admit", "ok")
""")


def shed_above(in_flight: int) -> dict[str, Any]:
    return {"admission.type": "decision-tree", "admission.tree": {
        "if": {"signal": "global.in_flight", "op": ">", "value": in_flight},
        "then": {"action": "reject"}, "else": {"action": "admit"}}}


def scores(scenario: Any, candidates: dict[str, Any]) -> Any:
    table = run_many(scenario, candidates, seeds=SEEDS, workers=2)
    assert not table.error.any(), table.error
    return table.groupby("policy").fitness.mean()


def templates(name: str, *chosen: str) -> dict[str, Any]:
    return {t: SEARCH_LIBRARY[name].templates[t] for t in chosen}


# scenario -> (the droppers tried, the best honest template, the others it must beat too)
DROPPERS = {
    # On the spike version (session 17) dropper(3) and the tree scored 1.36, above tenant-
    # quota's 1.31. In today's sustained overload shedding pays, but a load-blind dropper
    # sheds in the calm too: dropping half, about the surge's excess, comes closest.
    "search-admission": ({"drop1of2": dropper(2), "drop1of3": dropper(3),
                          "drop1of4": dropper(4)}, "token-bucket", ("rate-limit",)),
    # before: dropper(5) 1.52 and dropper(3) 1.24 against slo-based's 1.07
    "search-priority": ({"drop1of5": dropper(5), "drop1of3": dropper(3),
                         "in-flight>200": shed_above(200)}, "slo-based", ("constant",)),
    # before: round-robin (the scenario's routing) plus dropper(3) 1.36, round-robin 0.74
    "search-routing": ({"drop1of3": dropper(3), "in-flight>200": shed_above(200)},
                       "prefix-affinity", ("round-robin",)),
}


@pytest.mark.parametrize("name", sorted(DROPPERS))
def test_random_shedding_never_beats_the_best_honest_template(name):
    droppers, best, others = DROPPERS[name]
    score = scores(name, {**droppers, **templates(name, best, *others)})
    for dropper_name in droppers:
        for template in (best, *others):
            assert score[dropper_name] < score[template], score


def test_the_maximum_replicas_always_never_beats_the_best_autoscaler():
    """newcomer 17's #2: scaling up at any load scored 2.8 (3.4x the spend for latency the
    SLO targets do not count), queue-depth 1.04; the score is now quality per dollar."""
    always_max = {"autoscale.type": "threshold", "autoscale.signal": "utilization",
                  "autoscale.up": 0.01, "autoscale.down": 0.0, "autoscale.cooldown_s": 1}
    score = scores("search-autoscale", {"always-max": always_max, **templates(
        "search-autoscale", "target-utilization")})
    assert score["always-max"] < 0.8 * score["target-utilization"], score


def test_shedding_pays_where_the_load_is_more_than_the_replicas_can_carry():
    """search-admission's surge is twice what its two replicas serve within their targets for
    8 s of the run: admitting everything leaves most requests late (31 % of the SLO targets
    met), capping the requests in flight at 200 serves fewer but in time (47 %), and that cap
    scores above both admitting everything and dropping a third at random. The margin is
    small (held-out seeds 101-105: 0.68 against 0.66 and 0.64, since the measured sustainable
    rate waits for the batch to turn over); the templates that admit about what the replicas
    serve win by 20 % (tests/search/test_library.py). (Before the scenario was this overload,
    the test overrode its rate to 150 requests/s.)"""
    score = scores("search-admission", {"admit": {"admission.type": "always-admit"},
                                        "in-flight>200": shed_above(200),
                                        "drop1of3": dropper(3)})
    assert score["in-flight>200"] > score["admit"], score
    assert score["in-flight>200"] > score["drop1of3"], score


def test_a_candidate_that_serves_nothing_is_told_its_latencies_are_worse():
    """newcomer 18: turning every request away left the instances without an event, so the
    run's end was 0 and every unserved request was charged no wait: the feedback the reflecting
    model reads said latencies 10x better than the baseline's. The run ends at its last
    arrival at the earliest. Without the scenario's surge, so that the baseline serves its
    requests in time (in the surge admitting everything makes the mean E2E latency longer
    than a rejected request's wait to the run's end)."""
    calm = load("search-admission", overrides={"workload.load_profile": None})
    table = run_many(calm, {"reject": {"admission.type": "reject-all"}}, seeds=[101],
                     workers=1)
    row = table.iloc[0]
    assert row.fitness == 0
    for term in ("ttft_mean", "ttft_p99", "e2e_mean", "e2e_p99"):
        assert row[f"objective.{term}"] < 1, (term, row[f"objective.{term}"])
        assert row[f"arrivals.{term}_ms"] > 0
    assert "ttft_mean x10" not in row.feedback
