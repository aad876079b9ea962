"""validate-real with the runs' CPU KV offload modelled (`--kv-cpu-gib`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.validate.ground_truth import read_experiments
from blis_simpy.validate.harness import Latency, cpu_tier_blocks, stage_scenario
from tests.validate.test_validate_real import SHORT_S, write_ground_truth


@pytest.fixture(scope="module")
def ground_truth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ground_truth(tmp_path_factory.mktemp("ground-truth"))


def test_8_gib_hold_the_blocks_of_the_whole_tp_group():
    """Llama-2-7B: 512 KiB of KV a token, 8 MiB a 16-token block; Llama-2-70B: 320 KiB a
    token over its 4 GPUs, counted whole."""
    assert cpu_tier_blocks("meta-llama/llama-2-7b-hf", 8) == 1024
    assert cpu_tier_blocks("meta-llama/llama-2-70b-hf", 8) == 8 * 2**30 // (2 * 80 * 8 * 128 * 2
                                                                            * 16)


def test_stage_scenario_gets_the_cpu_tier_only_when_asked(ground_truth: Path):
    exp = next(e for e in read_experiments(ground_truth) if "llama-2-7b" in e.name)
    plain = stage_scenario(exp, exp.stages[0], Latency.roofline(), max_duration_s=SHORT_S)
    tiered = stage_scenario(exp, exp.stages[0], Latency.roofline(), max_duration_s=SHORT_S,
                            cpu_gib=8)
    assert not plain.engine.kv_tiers.enabled
    assert tiered.engine.kv_tiers.cpu_blocks == 1024


def test_cli_models_the_offload(ground_truth: Path):
    result = CliRunner().invoke(app, ["validate-real", str(ground_truth), "--only",
                                      "llama-2-7b-tp1-general/0", "--kv-cpu-gib", "8"])
    assert result.exit_code == 0, result.output
    assert "1 stages, 0 censored" in result.stdout
