"""Reading a finished run's output folder back, for `blis-simpy report` and `compare`.

Only pandas and yaml here: matplotlib is imported by `plots.render` alone, so importing
blis_simpy (or this package) never needs the optional `plots` extra.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text

TABLE_FORMATS = ("parquet", "csv")


def run_folder(path: Path) -> Path:
    """`path` if it is a run folder; a ScenarioError naming what is missing otherwise."""
    if not path.is_dir():
        raise ScenarioError(str(path), "is a file, not a run folder" if path.exists()
                            else "no such folder", "a run's output folder (run --out)")
    if not (path / "summary.json").is_file():
        raise ScenarioError(str(path), "no summary.json here (not a blis-simpy run folder)")
    return path


def load_summary(path: Path) -> dict[str, Any]:
    """The run's summary.json, checked to be a JSON object so callers can index it."""
    return json_object(run_folder(path) / "summary.json")


def json_object(file: Path) -> dict[str, Any]:
    """A JSON file holding an object; unreadable or other JSON is an input error."""
    text = read_text(file, str(file), "a JSON file written by blis-simpy run")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ScenarioError(str(file), f"unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise ScenarioError(str(file), "not a JSON object")
    return data


def read_table(path: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """`name`.parquet or `name`.csv, whichever the run wrote, with `columns` required."""
    for fmt in TABLE_FORMATS:
        file = path / f"{name}.{fmt}"
        if file.is_file():
            frame = read_file(file)
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise ScenarioError(str(file), f"missing columns: {', '.join(missing)}")
            return frame
    raise ScenarioError(str(path), f"no {name}.csv or {name}.parquet here")


def read_file(file: Path, text: tuple[str, ...] = ()) -> pd.DataFrame:
    """One table, with read errors (and parquet without pyarrow) turned into input errors;
    `text` columns of a CSV are read as text (a hash of digits stays a string)."""
    try:
        if file.suffix == ".parquet":
            return pd.read_parquet(file)
        return pd.read_csv(file, dtype=dict.fromkeys(text, str))
    except ImportError:
        raise ScenarioError(str(file), "reading parquet needs pyarrow: install "
                                       "blis-simpy[parquet]") from None
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(file), f"unreadable: {exc}") from None


def kv_blocks_total(path: Path) -> int | None:
    """engine.kv_blocks of the resolved scenario.yaml; None when it cannot be read, so the
    plot falls back to raw block counts instead of failing."""
    try:
        data = yaml.safe_load((path / "scenario.yaml").read_text(encoding="utf-8"))
        total = data["engine"]["kv_blocks"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    ok = isinstance(total, int | float) and not isinstance(total, bool)
    return int(total) if ok and math.isfinite(total) and total > 0 else None
