"""Anomaly severity: every type has a rule, every anomaly of a run gets a value in [0, 1]."""

from __future__ import annotations

import pytest

import blis_simpy
from blis_simpy.config.scenario import Burst, EvaluationConfig
from blis_simpy.core.records import ANOMALY_TYPES, Anomaly
from blis_simpy.metrics.trace.severity import severity
from tests.conftest import scenario

CONFIG = EvaluationConfig(preemption_storm=Burst(10, 1.0), rejection_burst=Burst(5, 1.0))


def anomaly(kind: str, start: int = 0, end: int = 0, requests: int = 1,
            judged: float = 0.0) -> Anomaly:
    return Anomaly(kind, start, "instance_0", tuple(f"r{i}" for i in range(requests)), "", end,
                   judged)


@pytest.mark.parametrize(("made", "expected"), [
    (anomaly("hol_blocking", 0, 250_000), 0.25),
    (anomaly("kv_hol_blocking", 0, 3_000_000), 1.0),
    (anomaly("preemption_storm", requests=10), 0.5),
    (anomaly("rejection_burst", requests=20), 1.0),
    (anomaly("priority_inversion", requests=2), 0.25),
    (anomaly("slo_class_inversion", requests=2), 0.25),
    (anomaly("slo_violation", judged=0.4), 0.4),
    (anomaly("shadow_divergence", judged=0.8), 0.8),
    (anomaly("kv_thrashing", judged=0.6), 0.6),
    (anomaly("scale_oscillation", 0, 5_000_000, requests=0, judged=0.3), 0.3),
])
def test_severity_rule_per_type(made, expected):
    assert severity(made, CONFIG) == pytest.approx(expected)


def test_every_anomaly_type_has_a_rule():
    for kind in ANOMALY_TYPES:
        assert 0 <= severity(anomaly(kind), CONFIG) <= 1


def test_slo_violation_severity_is_the_worst_relative_overshoot():
    result = blis_simpy.run(scenario(evaluation={"slo_targets": {"": {"ttft_ms": 20}}}))
    rows = result.anomalies[result.anomalies.type == "slo_violation"]
    assert len(rows)
    ttft = result.requests.set_index("id").ttft_ms
    for row in rows.itertuples():
        assert row.severity == pytest.approx(min(1.0, (ttft[row.requests] - 20) / 20))
    assert result.anomalies.severity.between(0, 1).all()
