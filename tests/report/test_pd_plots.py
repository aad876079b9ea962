"""`blis-simpy report` on a disaggregated run: pd.png beside the usual plots, instances named
with their role; the role column only in a P/D run's instances table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.scenario import Scenario
from blis_simpy.report.pd_plots import busy_before
from tests.cluster.pd_helpers import pd_scenario
from tests.conftest import scenario
from tests.report.test_report import PNG_MAGIC, cli

pytest.importorskip("matplotlib")


def test_a_pd_run_gets_pd_png_and_roles_and_a_monolithic_one_does_not(tmp_path: Path):
    split = tmp_path / "split"
    blis_simpy.run(Scenario.from_dict(pd_scenario(prefill=2, decode=1, requests=40))).save(
        split, "csv")
    result = cli("report", split)
    assert result.exit_code == 0, result.output
    assert (split / "plots" / "pd.png").read_bytes().startswith(PNG_MAGIC)
    roles = pd.read_csv(split / "instances.csv").groupby("instance").role.first().to_dict()
    assert sorted(roles.values()) == ["decode", "prefill", "prefill"]
    assert {"transfers.csv", "transfer_queue.csv"} <= {p.name for p in split.iterdir()}
    plain = tmp_path / "plain"
    blis_simpy.run(scenario(workload={"num_requests": 20})).save(plain, "csv")
    assert cli("report", plain).exit_code == 0
    assert not (plain / "plots" / "pd.png").exists()
    assert "role" not in pd.read_csv(plain / "instances.csv").columns
    assert not (plain / "transfers.csv").exists()


@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5)), max_size=20),
       st.integers(1, 30))
def test_busy_share_splits_steps_at_bin_edges(gaps, bins):
    """Non-overlapping steps: every bin's busy time is at most its width, and the bins add up
    to the busy time inside them (a step spanning an edge is split there)."""
    starts, lengths, t = [], [], 0.0
    for gap, length in gaps:
        starts.append(t + gap)
        lengths.append(length)
        t += gap + length
    edges = np.linspace(0, max(t, 1.0), bins + 1)
    per_bin = np.diff(busy_before(np.array(starts), np.array(lengths), edges))
    assert (per_bin <= np.diff(edges) + 1e-9).all() and (per_bin >= -1e-9).all()
    assert per_bin.sum() == pytest.approx(sum(lengths), abs=1e-9)
