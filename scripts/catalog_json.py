"""Write blis_simpy/data/defaults.json, the JSON twin of the bundled defaults.yaml that runs
read (config/catalog.py says why): run after editing defaults.yaml.

    python scripts/catalog_json.py
"""

from __future__ import annotations

import json
from pathlib import Path

from blis_simpy.config.catalog import BUNDLED_JSON, bundled_yaml

TWIN = Path(__file__).resolve().parents[1] / "blis_simpy" / "data" / BUNDLED_JSON


def twin_text() -> str:
    """The twin's exact text: one row of the models list per line keeps diffs readable."""
    data = bundled_yaml()
    lines = ["{"]
    for i, (section, value) in enumerate(data.items()):
        comma = "," if i < len(data) - 1 else ""
        if isinstance(value, list):
            rows = [json.dumps(row) for row in value]
            body = ",\n  ".join(rows)
            lines.append(f"{json.dumps(section)}: [\n  {body}\n]{comma}")
        else:
            lines.append(f"{json.dumps(section)}: {json.dumps(value, indent=1)}{comma}")
    return "\n".join(lines) + "\n}\n"


if __name__ == "__main__":
    TWIN.write_text(twin_text(), encoding="utf-8")
    print(f"wrote {TWIN}")
