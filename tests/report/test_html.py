"""`blis-simpy report OUTDIR --html` and `compare RUN... --html FILE`: one self-contained file
(what a browser draws of it: test_html_browser.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blis_simpy
from blis_simpy.report import html
from tests.report.test_report import assert_usage_error, cli, run_into

pytest.importorskip("bokeh")

SECTIONS = ("Summary", "SLO attainment", "Latency distributions", "Over time", "Anomalies",
            "Trace summary")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("html-runs")
    return run_into(root / "slow", 20), run_into(root / "fast", 40), run_into(root / "x", 80)


def plots(text: str) -> int:
    return text.count("<div class='plot'>")


def test_report_html_is_one_self_contained_file_with_every_section(runs):
    result = cli("report", runs[0], "--html")
    assert result.exit_code == 0, result.output
    path = runs[0] / "report.html"
    assert result.stdout.strip() == str(path)
    text = path.read_text()
    for section in SECTIONS:
        assert f"<h2>{section}</h2>" in text
    assert not re.search(r"<script[^>]*\bsrc=|<link[^>]*\bhref=", text)  # nothing fetched
    assert "Bokeh" in text and plots(text) == 8
    assert "## Outcome" in text  # the trace summary
    assert len(text) < 2_000_000


def test_report_html_out_option_names_the_file(runs, tmp_path):
    target = tmp_path / "deep" / "r.html"
    assert cli("report", runs[1], "--html", "--out", target).exit_code == 0
    assert target.is_file() and not (runs[1] / "report.html").exists()
    assert not list(target.parent.glob(".*tmp"))


def test_compare_html_puts_three_runs_side_by_side(runs, tmp_path):
    target = tmp_path / "cmp.html"
    result = cli("compare", *runs, "--html", target)
    assert result.exit_code == 0, result.output
    text = target.read_text()
    for name in ("slow", "fast", "x", "fast / slow", "x / slow"):
        assert f"<th>{name}</th>" in text
    assert plots(text) == 6


def test_compare_html_tells_runs_with_one_folder_name_apart(runs, tmp_path):
    target = tmp_path / "same.html"
    assert cli("compare", runs[0], runs[0], "--html", target).exit_code == 0
    assert "<th>slow (1)</th>" in target.read_text()


def test_report_html_copes_with_a_run_where_nothing_completed(runs, tmp_path):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    for name in ("summary.json", "scenario.yaml", "metrics.json"):
        (run_dir / name).write_bytes((runs[0] / name).read_bytes())
    for table in ("requests", "steps"):
        header = (runs[0] / f"{table}.csv").read_text().splitlines()[0]
        (run_dir / f"{table}.csv").write_text(header + "\n")
    result = cli("report", run_dir, "--html")
    assert result.exit_code == 0, result.output
    assert plots((run_dir / "report.html").read_text()) == 8


def test_html_errors_are_one_line_exit_2(runs, tmp_path):
    assert_usage_error(cli("report", tmp_path / "nope", "--html"), "no such folder")
    assert_usage_error(cli("report", runs[0], "--html", "--out", tmp_path), "is a folder")
    assert_usage_error(cli("compare", runs[0], "--html", tmp_path / "c.html"), "two or more")
    assert_usage_error(cli("compare", *runs), "two (A and B)")
    assert not (tmp_path / "c.html").exists()


def test_html_files_replace_an_existing_file_only_with_force(runs, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("a user's own notes\n")
    link = tmp_path / "link.html"
    link.symlink_to(notes)
    for args in (("compare", *runs[:2], "--html", notes), ("compare", *runs[:2], "--html", link),
                 ("report", runs[0], "--html", "--out", notes)):
        assert_usage_error(cli(*args), "already exists")
    assert notes.read_text() == "a user's own notes\n" and link.is_symlink()
    assert cli("compare", *runs[:2], "--html", notes, "--force").exit_code == 0
    assert notes.read_text().startswith("<!DOCTYPE html>")
    # the default file in the run's own folder is the command's: a second report rewrites it
    assert cli("report", runs[2], "--html").exit_code == 0
    assert cli("report", runs[2], "--html").exit_code == 0


def test_speculation_is_reported_overall_and_per_tenant_and_compared(runs, tmp_path):
    spec = tmp_path / "spec"
    blis_simpy.run("speculative-draft-model", overrides={"workload.duration_s": 3}).save(spec)
    assert cli("report", spec, "--html").exit_code == 0
    text = (spec / "report.html").read_text()
    section = text.split("Speculative decoding")[1].split("<h2>")[0]
    for shown in ("draft_model", "measured acceptance", "<td>all</td>", "<td>chat</td>",
                  "<td>code</td>"):
        assert shown in section, shown
    target = tmp_path / "cmp.html"
    assert cli("compare", runs[0], spec, "--html", target).exit_code == 0
    assert "<td>speculation acceptance</td>" in target.read_text()
    plain = tmp_path / "plain.html"
    assert cli("compare", *runs[:2], "--html", plain).exit_code == 0
    assert "speculation" not in plain.read_text()  # no such rows without speculation


def test_report_html_without_bokeh_says_how_to_install(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bokeh", None)
    assert_usage_error(cli("report", runs[0], "--html", "--out", tmp_path / "r.html"),
                       "install blis-simpy[plots]")
    assert not (tmp_path / "r.html").exists()


def test_bokeh_is_not_imported_with_blis_simpy_or_its_command_line():
    code = ("import sys, blis_simpy, blis_simpy.cli, blis_simpy.report.html; "
            "assert 'bokeh' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_long_series_keep_every_bins_peak():
    times = np.linspace(0, 100, 50_000)
    values = np.zeros(50_000)
    values[12_345] = 7.0  # one spike among many points
    x, y = html.binned_max(times, values)
    assert len(x) <= html.MAX_POINTS and y.max() == 7.0
    short = np.arange(5.0)
    assert html.binned_max(short, short)[1].tolist() == short.tolist()


def test_cluster_total_sums_each_instances_latest_value():
    import pandas as pd

    steps = pd.DataFrame({"instance": ["a", "b", "a", "b"], "start_s": [0.0, 0.5, 1.0, 1.5],
                          "queue_depth": [3, 2, 1, 5]})
    times, totals = html.cluster_total(steps, "queue_depth")
    assert times.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert totals.tolist() == [3, 5, 3, 6]


def test_report_html_is_byte_identical_run_to_run(runs, tmp_path):
    """newcomer 16's #17: Bokeh's random document and element UUIDs (and its model counter,
    which runs on within one process) made two reports of one folder differ."""
    first, second = tmp_path / "r1.html", tmp_path / "r2.html"
    html.render_html(runs[0], first)
    html.render_html(runs[0], second)
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text()
    assert "00000000-0000-4000-8000-000000000000" in text
    both = [tmp_path / "c1.html", tmp_path / "c2.html"]
    for page in both:
        html.compare_html(list(runs[:2]), page)
    assert both[0].read_bytes() == both[1].read_bytes()


def test_stable_ids_rename_only_what_bokeh_generated():
    script = ('{"docid":"0f0e0d0c-0b0a-4988-8776-655443322110","roots":{"p1006":"x"},'
              '"id":"p1006","attributes":{"label":"p99","ref":{"id":"p1006"}}}')
    div = '<div id="11111111-2222-4333-8444-555555555555" data-root-id="p1006"></div>'
    new_script, (new_div,) = html.stable_ids(script, [div])
    assert '"p1006"' not in new_script + new_div and '"p99"' in new_script
    assert '"m0"' in new_script and 'data-root-id="m0"' in new_div
    assert "00000000-0000-4000-8000-000000000001" in new_script + new_div


def test_a_report_of_thousands_of_tenants_and_classes_caps_what_it_draws(tmp_path):
    """newcomer 16's #10: a trace with a tenant per request and 2,000 SLO classes took 154 s
    and 541 MB to report (a CDF line per class, a table row per tenant). The busiest
    TOP_CLASSES classes are drawn, the rest pooled; the tables keep the busiest TOP_ROWS."""
    from blis_simpy.report.plots import TOP_CLASSES

    rows = "".join(f"{0.01 * i:.6f},r{i},m,\"[1,2,3]\",\"[1,2]\",tenant{i},class{i % 60}\n"
                   for i in range(240))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,request_id,model,prefill_tokens,decode_tokens,tenant_id,"
                     "slo_class\n" + rows)
    from blis_simpy.config.scenario import Scenario
    from tests.conftest import BASE

    data = {k: v for k, v in BASE.items() if k != "workload"}
    run_dir = tmp_path / "run"
    blis_simpy.run(Scenario.from_dict({**data, "workload": {"type": "trace",
                                                            "path": str(trace)}})
                   ).save(run_dir, "csv")
    page = html.render_html(run_dir, tmp_path / "r.html").read_text()
    assert f"other ({60 - TOP_CLASSES} classes)" in page
    assert f"the {html.TOP_ROWS} tenants with the most requests of 240" in page
    assert page.count("<td>tenant") == html.TOP_ROWS
