"""The trace summary: it names the real problem of the library's pathological scenarios, stays
within its size bound, is the same text for the same run (from the Result or read back from
the output folder), and each strategy gives its sections."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import blis_simpy
from blis_simpy.metrics.trace.summary import STRATEGIES, TraceInputs, focus_for
from blis_simpy.report.trace_summary import summarize
from tests.conftest import BASE, scenario

LIBRARY = Path(blis_simpy.__file__).parent / "scenarios"


def library_run(name: str) -> blis_simpy.Result:
    return blis_simpy.run(LIBRARY / f"{name}.yaml",
                          overrides={"cluster.trace_level": "decisions"})


@pytest.fixture(scope="module")
def unfair() -> blis_simpy.Result:
    return library_run("unfair-tenants")


@pytest.fixture(scope="module")
def busiest() -> blis_simpy.Result:
    return library_run("routing-always-busiest")


def key_issues(text: str) -> list[str]:
    section = text.split("## Key Issues")[1].split("\n## ")[0]
    return [line for line in section.splitlines()[1:] if line[:1].isdigit()]


def test_unfair_tenants_summary_names_the_starved_tenant_and_its_missed_target(unfair):
    text = unfair.summary_text()
    first = key_issues(text)[0]
    assert first.startswith("1. FAIRNESS: tenant realtime attains")
    assert "while bulk attains 100%" in first
    # both targets missed, nearly equally since the physical model's refit (ttft_ms 129,
    # tpot_ms 128 of its requests); the focus protects the one missed most
    misses = re.search(r"realtime's misses: (\w+) (\d+), (\w+) (\d+)", text)
    assert misses is not None and {misses[1], misses[3]} == {"ttft_ms", "tpot_ms"}
    assert int(misses[2]) >= int(misses[4])
    assert f"Protect tenant realtime's {misses[1]}" in text.split("## Suggested Focus")[1]


def test_always_busiest_summary_names_the_load_imbalance(busiest):
    """One instance gets everything and saturates: the verdict leads, says the fleet could
    carry the load if it were spread, and the advice is to route by load (not to add
    instances)."""
    text = busiest.summary_text()
    assert text.startswith("**SATURATED**")
    first, second = key_issues(text)[:2]
    assert first == "1. CAPACITY: saturated although the fleet could carry the load: it is " \
        "unevenly routed"
    assert second == ("2. ROUTING: load imbalance: instance_0 received 100% of the requests "
                      "(fair share 25%) under always-busiest routing")
    focus = text.split("## Suggested Focus")[1]
    assert "Route by load" in focus and "Add capacity" not in focus


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("max_tokens", [150, 400, 1000, 3000])
def test_summaries_stay_within_their_bound(unfair, strategy, max_tokens):
    text = unfair.summary_text(max_tokens=max_tokens, strategy=strategy)
    assert len(text) <= 4 * max_tokens
    assert text.startswith("## Outcome\n")


def test_the_same_run_gives_the_same_text_from_the_result_and_from_its_folder(busiest,
                                                                            tmp_path):
    busiest.save(tmp_path / "out", "csv")
    for strategy in STRATEGIES:
        text = busiest.summary_text(strategy=strategy)
        assert text == busiest.summary_text(strategy=strategy)
        assert summarize(tmp_path / "out", strategy=strategy) == text


@pytest.mark.parametrize(("strategy", "sections"), [
    ("issue_focused", ["Outcome", "Key Issues", "Counterfactual Analysis", "Worst Decisions",
                       "Suggested Focus"]),
    ("decision_audit", ["Outcome", "Decision Audit", "Sampled Decisions", "Suggested Focus"]),
    ("counterfactual", ["Outcome", "Counterfactual Analysis", "Worst Decisions",
                        "Suggested Focus"]),
    ("pattern_mining", ["Outcome", "Patterns in Poor Outcomes", "Key Issues",
                        "Suggested Focus"]),
])
def test_each_strategy_gives_its_sections(unfair, strategy, sections):
    text = unfair.summary_text(max_tokens=3000, strategy=strategy)
    titles = [line[3:].split(" (")[0] for line in text.splitlines() if line.startswith("## ")]
    assert titles == sections


def test_pattern_mining_finds_the_tenant_behind_the_misses(unfair):
    text = unfair.summary_text(strategy="pattern_mining")
    patterns = text.split("## Patterns in Poor Outcomes")[1]
    assert "tenant=realtime: 100% of poor outcomes" in patterns


def test_counterfactual_reports_regret_in_ms_of_ttft(unfair):
    text = unfair.summary_text(strategy="counterfactual")
    assert "- Routing regret: avg " in text and " ms of estimated TTFT per decision" in text


def test_an_untraced_run_says_how_to_get_the_decision_sections():
    text = blis_simpy.run(scenario()).summary_text()
    assert "decisions were not traced" in text


def test_a_run_where_nothing_completed_says_so_first_and_never_advises_keeping_it(tmp_path):
    """An empty trace: the feedback a reflecting LLM reads must not read as a clean run."""
    (tmp_path / "empty.csv").write_text(
        "arrival_time,request_id,model,prefill_tokens,decode_tokens\n")
    empty = {**BASE, "workload": {"type": "trace", "path": str(tmp_path / "empty.csv")}}
    text = blis_simpy.run(blis_simpy.Scenario.from_dict(empty)).summary_text()
    first, *_ = key_issues(text)
    assert "RUN: no request completed (0 arrived)" in first
    assert "no request arrived" in text  # the run's own warning, as evidence
    assert "keep the current policy" not in text


def test_bad_arguments_are_refused(busiest):
    with pytest.raises(ValueError, match="strategy"):
        busiest.summary_text(strategy="vibes")
    with pytest.raises(ValueError, match="max_tokens"):
        busiest.summary_text(max_tokens=10)


def inputs_with(policies: dict, instances: int) -> TraceInputs:
    """What focus_for reads: the scenario's policies and how many instances served."""
    return TraceInputs(summary={"instances": [{}] * instances if instances > 1 else []},
                       metrics={}, requests=pd.DataFrame(), anomalies=None, decisions=None,
                       scenario={"policies": policies, "cluster": {"instances": instances}})


@pytest.mark.parametrize(("policies", "instances", "kind", "says", "never"), [
    ({"scheduler": {"type": "fcfs"}}, 2, "priority_inversion", "scheduler priority-fcfs", ""),
    ({"scheduler": {"type": "priority-fcfs"}, "priority": {"type": "slo-based"}}, 2,
     "priority_inversion", "already ordered by priority", "Order the wait queue"),
    ({"scheduler": {"type": "priority-fcfs"}, "priority": {"type": "deadline-aware"}}, 2,
     "slo_class_inversion", "already ordered by priority", "higher priority"),
    ({"scheduler": {"type": "fcfs"}}, 2, "slo_class_inversion", "higher priority", ""),
    ({}, 1, "kv_hol_blocking", "with one instance there is nowhere else to route", "routing"),
    ({}, 3, "kv_hol_blocking", "Avoid routing long prompts", ""),
    ({}, 1, "preemption_storm", "more KV blocks", "Route away"),
])
def test_findings_and_advice_are_grounded_in_what_the_run_has(policies, instances, kind, says,
                                                              never):
    """Issue 31: no advice to adopt a policy the run already uses, nor to route better when
    there is one instance."""
    advice = focus_for(kind, inputs_with(policies, instances))
    assert says in advice
    assert not never or never not in advice
