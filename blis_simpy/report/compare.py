"""Two runs' summary.json side by side, with the B/A ratio of every numeric key.

Keys are taken generically (A's order, then B's extra keys), so metrics added to the summary
later show up without changes here. Nested values (the per-instance list) are skipped: they
do not line up key for key between runs with different instance counts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from blis_simpy.report import load_summary, run_folder

MISSING = "-"


@dataclass(frozen=True)
class Row:
    key: str
    a: Any  # None when the key is absent from A
    b: Any
    ratio: float | None
    a_present: bool = True
    b_present: bool = True


@dataclass(frozen=True)
class State:
    """What a run's summary says of its own trustworthiness: the saturation verdict, its
    level and the run's warnings (a ratio between a saturated run and a stable one is no
    like-for-like comparison, so each run's state is shown beside the ratios)."""

    verdict: str
    level: str
    warnings: tuple[str, ...]
    window: str = "unknown"  # the measurement window (`window_text`)

    def line(self) -> str:
        return f"window {self.window}; saturation {self.verdict} ({self.level}), " \
            f"{len(self.warnings)} warning" + ("" if len(self.warnings) == 1 else "s")

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "level": self.level, "warnings": list(self.warnings),
                "window": self.window}


def window_text(folder: Path) -> str:
    """The measurement window the run's numbers cover, from the scenario.yaml its folder
    holds: "whole run", "10-30 s", "from 10 s"; "unknown" without a readable one."""
    try:
        data = yaml.safe_load((run_folder(folder) / "scenario.yaml").read_text())
        window = (data.get("evaluation") or {}).get("window") or {}  # absent: the default
        start, end = float(window.get("warmup_s") or 0), window.get("end_s")
    except (OSError, yaml.YAMLError, TypeError, ValueError, AttributeError):
        return "unknown"
    if end is None:
        return "whole run" if start == 0 else f"from {start:g} s"
    return f"{start:g}-{float(end):g} s"


def windows_note(states: tuple[State, State]) -> str | None:
    """A warning when the two runs were measured over different windows: their counts and
    rates then cover different spans, and B/A compares the windows as much as the runs."""
    a, b = states
    if a.window == b.window:
        return None
    return (f"A and B were measured over different windows ({a.window} and {b.window}): "
            "counts and rates cover different spans")


def state(summary: dict[str, Any], window: str = "unknown") -> State:
    """The run's `State` from its summary.json; a key that is absent or not what a run
    writes reads as "unknown" (an older or hand-made folder)."""
    saturation = summary.get("saturation")
    saturation = saturation if isinstance(saturation, dict) else {}
    warnings = summary.get("warnings")
    warnings = warnings if isinstance(warnings, list) else []

    def text(key: str) -> str:
        found = saturation.get(key)
        return found if isinstance(found, str) else "unknown"

    return State(text("verdict"), text("level"), tuple(str(w) for w in warnings), window)


def compare_runs(run_a: Path, run_b: Path) -> tuple[list[Row], tuple[State, State]]:
    """Rows for every flat key of either run's summary.json, and each run's `State`."""
    a, b = load_summary(run_a), load_summary(run_b)
    return compare(a, b), (state(a, window_text(run_a)), state(b, window_text(run_b)))


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Row]:
    keys = list(a) + [k for k in b if k not in a]
    return [row(k, a, b) for k in keys if not (nested(a.get(k)) or nested(b.get(k)))]


def row(key: str, a: dict[str, Any], b: dict[str, Any]) -> Row:
    va, vb = a.get(key), b.get(key)
    return Row(key, va, vb, ratio(va, vb), key in a, key in b)


def nested(value: Any) -> bool:
    return isinstance(value, list | dict | tuple)


def numeric(value: Any) -> bool:
    """A real number; bools are ints to Python but not quantities to compare."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def ratio(a: Any, b: Any) -> float | None:
    """B/A; None when either is not a finite number or A is 0."""
    if not (numeric(a) and numeric(b)) or a == 0:
        return None
    value = b / a
    return value if math.isfinite(value) else None


def cell(value: Any, present: bool = True) -> str:
    """A value as shown in the table: numbers to 6 significant digits, absent as "-"."""
    if not present:
        return MISSING
    if numeric(value):
        return f"{value:.6g}"
    if value is None:
        return "null"
    return json.dumps(value) if isinstance(value, bool) else str(value)


def table(rows: list[Row], run_a: Path, run_b: Path, states: tuple[State, State]) -> str:
    """Aligned text: which folder is A and B with each one's saturation verdict and
    warnings, then key, A, B, B/A."""
    cells = [("key", "A", "B", "B/A")]
    cells += [(r.key, cell(r.a, r.a_present), cell(r.b, r.b_present),
               "" if r.ratio is None else cell(r.ratio)) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = []
    for name, path, run in zip("AB", (run_a, run_b), states, strict=True):
        lines.append(f"{name}: {path}: {run.line()}")
        lines += [f"   warning: {w}" for w in run.warnings]
    note = windows_note(states)
    if note is not None:
        lines.append(f"warning: {note}")
    for key, *values in cells:
        numbers = "  ".join(v.rjust(w) for v, w in zip(values, widths[1:], strict=True))
        lines.append(f"{key.ljust(widths[0])}  {numbers}".rstrip())
    return "\n".join(lines) + "\n"


def as_json(rows: list[Row], run_a: Path, run_b: Path, states: tuple[State, State]) -> str:
    """Each run's state (`state_a`, `state_b`: verdict, level, warnings), then the rows with
    raw values; absent keys and undefined ratios are null, non-finite numbers are strings
    ("nan", "inf") so the output stays strict JSON."""
    data = {
        "a": str(run_a),
        "b": str(run_b),
        "state_a": states[0].to_dict(),
        "state_b": states[1].to_dict(),
        "windows_differ": windows_note(states) is not None,
        "rows": [{"key": r.key, "a": plain(r.a), "b": plain(r.b), "ratio": r.ratio,
                  "in_a": r.a_present, "in_b": r.b_present} for r in rows],
    }
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
