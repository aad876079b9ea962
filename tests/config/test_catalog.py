"""Runs read the bundled catalog from data/defaults.json, the JSON twin of defaults.yaml
(config/catalog.py): the twin must hold exactly the YAML's data, written as the script writes it."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from blis_simpy.config.catalog import BUNDLED_JSON, bundled, bundled_yaml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "catalog_json.py"
STALE = "data/defaults.json differs from defaults.yaml: run `python scripts/catalog_json.py`"


def test_bundled_catalog_json_twin_holds_the_yaml_data():
    # json.dumps tells 1 from 1.0, which == does not
    assert json.dumps(bundled().data) == json.dumps(bundled_yaml()), STALE


def test_bundled_catalog_json_twin_is_the_scripts_output():
    script = runpy.run_path(str(SCRIPT))  # (not as __main__: it writes nothing)
    assert script["TWIN"].name == BUNDLED_JSON
    assert script["TWIN"].read_text(encoding="utf-8") == script["twin_text"](), STALE
