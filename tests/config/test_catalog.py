"""Runs read the bundled catalog from data/defaults.json, the JSON twin of defaults.yaml
(config/catalog.py): the twin must hold exactly the YAML's data, written as the script writes it."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from blis_simpy.api import prepare
from blis_simpy.config.catalog import BUNDLED_JSON, bundled, bundled_yaml
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "catalog_json.py"
STALE = "data/defaults.json differs from defaults.yaml: run `python scripts/catalog_json.py`"


def test_bundled_catalog_json_twin_holds_the_yaml_data():
    # json.dumps tells 1 from 1.0, which == does not
    assert json.dumps(bundled().data) == json.dumps(bundled_yaml()), STALE


def test_bundled_catalog_json_twin_is_the_scripts_output():
    script = runpy.run_path(str(SCRIPT))  # (not as __main__: it writes nothing)
    assert script["TWIN"].name == BUNDLED_JSON
    assert script["TWIN"].read_text(encoding="utf-8") == script["twin_text"](), STALE


@pytest.mark.parametrize(("text", "kind"), [("[1]", "an array"), ("null", "null"),
                                            ('"s"', "a string"), ("3", "a number")])
@pytest.mark.parametrize("key", ["latency.model_config", "latency.hardware_config",
                                 "engine.speculative.model_config"])
def test_a_config_file_that_is_not_a_json_object_is_refused_naming_the_key(tmp_path, text,
                                                                            kind, key):
    """A model or hardware config holding `[1]` or `null` ended in a traceback (AttributeError
    or TypeError) far from the file; it is refused before the run."""
    (tmp_path / "c.json").write_text(text)
    data = {"version": 1, "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100",
                                    "tp": 1}, "latency": {"type": "physical"}}
    if key.startswith("engine"):
        data["engine"] = {"speculative": {"method": "draft_model", "draft_tokens": 2,
                                          "acceptance_rate": 0.5,
                                          "model": "meta-llama/llama-3.1-8b-instruct"}}
    section, _, leaf = key.rpartition(".")
    target = data
    for part in section.split("."):
        target = target[part]
    target[leaf] = str(tmp_path / "c.json")
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(data))
    assert err.value.path == key and f"holds {kind}, not a JSON object" in err.value.problem
