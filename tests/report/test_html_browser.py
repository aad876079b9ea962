"""The HTML reports in a real browser: Debian's Chromium, headless, driven by Playwright.

Each report of a run with every optional section (autoscaled replicas, P/D pools, KV tiers, a
decision trace) and a three-run comparison is opened with every request that would leave the
file refused: every plot must draw, with no console error and no request. The screenshot of
the first is what docs/images/report.png shows (`python scripts/report_screenshot.py`).

`make browser` (run by `make test`) installs Chromium with apt-get; where it cannot (no root),
this module is skipped and says how to install it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("bokeh", reason="the HTML report needs bokeh: pip install "
                    "'blis-simpy[plots]'")
pytest.importorskip("playwright", reason="the browser test needs playwright: pip install "
                    "'blis-simpy[dev]'")

import blis_simpy
from blis_simpy.report.html import compare_html, render_html
from scripts.report_screenshot import browser, check, chromium

if chromium() is None and os.environ.get("CI"):  # CI runs as root: `make browser` installs it
    pytest.fail("no Chromium at /usr/bin/chromium in CI: `make browser` should have installed "
                "it", pytrace=False)
if chromium() is None:
    pytest.skip("no Chromium at /usr/bin/chromium: `make browser` installs it (apt-get "
                "install chromium, as root)", allow_module_level=True)

# Each library scenario cut short; together they draw every kind of plot the report has.
RUNS = {
    "unfair-tenants": {"workload.duration_s": 10, "cluster.trace_level": "decisions"},
    "autoscale-spike": {"workload.max_requests": 150},
    "pd-vs-monolithic": {"workload.num_requests": 60},
    "kv-offload": {"workload.duration_s": 8},
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("html")
    reports = {}
    for name, overrides in RUNS.items():
        blis_simpy.run(name, overrides=overrides).save(root / name)
        reports[name] = render_html(root / name, root / f"{name}.html")
    reports["compare"] = compare_html([root / n for n in ("unfair-tenants", "autoscale-spike",
                                                          "kv-offload")], root / "compare.html")
    return reports


def test_every_plot_of_every_report_draws_offline_without_console_errors(reports, tmp_path):
    shot = tmp_path / "report.png"
    with browser() as chrome:
        seen = {name: check(chrome, path, shot if name == "unfair-tenants" else None)
                for name, path in reports.items()}
    for name, checked in seen.items():
        assert checked.drawn, f"{name}: no plots found"
        blank = [i for i, drawn in enumerate(checked.drawn) if not drawn]
        assert not blank, f"{name}: plots {blank} of {len(checked.drawn)} drew nothing"
        assert checked.errors == [], f"{name}: console errors {checked.errors}"
        assert checked.requests == [], f"{name}: requests left the file {checked.requests}"
    # the optional plots are there: replicas; replicas and the P/D pools; the KV tiers
    base = len(seen["unfair-tenants"].drawn)
    assert len(seen["autoscale-spike"].drawn) == base + 1
    assert len(seen["pd-vs-monolithic"].drawn) == base + 2
    assert len(seen["kv-offload"].drawn) == base + 1
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
