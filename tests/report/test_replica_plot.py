"""`blis-simpy report` on an autoscaled run also draws the replica count over time, next to
the load and the latency; a run without a deployment section gets no such plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from blis_simpy.report import plots
from tests.cluster.autoscale_helpers import run, scenario

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
pytest.importorskip("matplotlib")


def test_an_autoscaled_run_gets_a_replica_plot(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    run(scenario({"type": "oscillator"}, rate=10, duration=5)).save(folder, "csv")
    written = plots.render(folder, tmp_path / "plots")
    assert [p.name for p in written][-1] == "replicas.png"
    assert (tmp_path / "plots" / "replicas.png").read_bytes().startswith(PNG_MAGIC)


def test_a_fixed_fleet_without_deployment_gets_none(tmp_path: Path) -> None:
    data = scenario(None, duration=2)
    del data["deployment"]
    run(data).save(tmp_path / "run", "csv")
    written = plots.render(tmp_path / "run", tmp_path / "plots")
    assert "replicas.png" not in [p.name for p in written]
