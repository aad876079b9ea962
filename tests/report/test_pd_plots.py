"""`blis-simpy report` on a disaggregated run: pd.png beside the usual plots, instances named
with their role; the role column only in a P/D run's instances table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import blis_simpy
from blis_simpy.config.scenario import Scenario
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
