"""`blis-simpy report` on a run with KV tiers: kv_tiers.png beside the three usual plots."""

from __future__ import annotations

from pathlib import Path

import pytest

import blis_simpy
from tests.conftest import scenario
from tests.report.test_report import PNG_MAGIC, cli

pytest.importorskip("matplotlib")


def test_a_run_with_tiers_gets_kv_tiers_png_and_one_without_does_not(tmp_path: Path):
    workload = {"num_requests": 80, "rate_per_s": 40, "prefix_tokens": 512}
    tiered = tmp_path / "tiered"
    blis_simpy.run(scenario(engine={"kv_blocks": 120, "kv_tiers": {"cpu_blocks": 500}},
                            workload=workload)).save(tiered, "csv")
    result = cli("report", tiered)
    assert result.exit_code == 0, result.output
    assert (tiered / "plots" / "kv_tiers.png").read_bytes().startswith(PNG_MAGIC)
    plain = tmp_path / "plain"
    blis_simpy.run(scenario(workload=workload)).save(plain, "csv")
    assert cli("report", plain).exit_code == 0
    assert not (plain / "plots" / "kv_tiers.png").exists()
