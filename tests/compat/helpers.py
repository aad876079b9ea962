"""Helpers shared by the tests of compat's converters: reference command lines
(test_convert, test_flags, test_policy_config) and PolicyBundle files (test_bundle,
test_policy_config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blis_simpy.compat.convert import blis_command
from blis_simpy.compat.policy_config import policy_config
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError

LLAMA = "meta-llama/llama-3.1-8b-instruct"
COEFFS = ["--alpha-coeffs", "1,2,3", "--beta-coeffs", "4,5,6"]
BASE = ["--model", LLAMA, "--beta-coeffs", "4,5,6"]  # blackbox; alpha left to the cases


def convert(*args: str, cwd: Path | None = None) -> tuple[dict, Scenario]:
    data = blis_command(["run", *args], cwd=cwd)
    return data, Scenario.from_dict(data)


def policies(scenario: Scenario) -> dict[str, tuple[str, dict]]:
    p = scenario.policies
    return {axis: (getattr(p, axis).type, getattr(p, axis).params)
            for axis in ("admission", "priority", "routing", "scheduler")}


def bundle(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def write(tmp_path: Path, text: str) -> Path:
    return bundle(tmp_path, text)


def error(tmp_path: Path, text: str) -> ScenarioError:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        policy_config(path)
    assert err.value.path.startswith(str(path))
    return err.value
