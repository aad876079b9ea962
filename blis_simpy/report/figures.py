"""What every plot module shares: a figure made without pyplot's global state, the instance
line styles, natural name order and time bins. Its own module so that the plots of one feature
(pd_plots, scaling, tier_plots) and the report's main plots (plots.py) all build on it."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
TARGET_BINS = 30  # short runs: aim for about this many throughput bins
# Instance lines: the ten qualitative colours, then again dashed, dotted, dash-dotted: 40
# distinguishable (colour, style) pairs, so a 16-instance legend has no two alike.
COLOURS = tuple(f"tab:{c}" for c in ("blue", "orange", "green", "red", "purple", "brown",
                                     "pink", "gray", "olive", "cyan"))
LINE_STYLES = ("-", "--", ":", "-.")


def new_figure(width: float, height: float, rows: int, cols: int = 1,
               sharex: bool = False) -> tuple[Figure, np.ndarray]:
    """A fixed-size figure with an Agg canvas, without touching pyplot's global state."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, cols, sharex=sharex, squeeze=False)
    return figure, axes.ravel()


def natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key that orders the numbers inside names by value: instance_2 before instance_10."""
    return [(0, int(part)) if part.isdigit() else (1, part)
            for part in re.split(r"(\d+)", name) if part]


def line_style(i: int) -> tuple[str, str]:
    """The i-th instance's (colour, line style): each colour solid first, then dashed, ..."""
    return COLOURS[i % len(COLOURS)], LINE_STYLES[(i // len(COLOURS)) % len(LINE_STYLES)]


def bin_width(span_s: float) -> float:
    """1 s, or for runs shorter than TARGET_BINS seconds a 1-2-5 width giving ~TARGET_BINS
    bins, so a 2 s test run still shows a shape instead of two bars."""
    if span_s >= TARGET_BINS or span_s <= 0:
        return 1.0
    raw = span_s / TARGET_BINS
    power = 10.0 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def bin_edges(end: float, width: float) -> np.ndarray:
    """Edges from 0 whose last is at or past `end`, so np.histogram drops no completion."""
    count = max(math.ceil(end / width), 1)
    if count * width < end:  # rounding in end / width
        count += 1
    return width * np.arange(count + 1)
