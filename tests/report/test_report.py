"""`blis-simpy report` (PNG plots of a run folder) and `blis-simpy compare` (two summaries)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import blis_simpy
from blis_simpy.cli import app
from blis_simpy.report import plots
from blis_simpy.report.compare import cell, compare
from tests.conftest import scenario

RUNNER = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("latency_cdf.png", "instances.png", "throughput.png")


def run_into(folder: Path, rate: float) -> Path:
    """A tiny two-instance run with 60 requests, saved as CSV tables."""
    changes = {"cluster": {"instances": 2}, "workload": {"num_requests": 60, "rate_per_s": rate}}
    blis_simpy.run(scenario(**changes)).save(folder, "csv")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    return run_into(root / "slow", 20), run_into(root / "fast", 40)


def cli(*args: object):
    return RUNNER.invoke(app, [str(a) for a in args])


def assert_usage_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.output


# --- report ---------------------------------------------------------------------------------

def test_report_writes_three_pngs_into_run_plots_by_default(runs):
    run_dir = runs[0]
    result = cli("report", run_dir)
    assert result.exit_code == 0, result.output
    for name in PLOTS:
        path = run_dir / "plots" / name
        assert str(path) in result.stdout
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_report_out_option_and_same_bytes_every_time(runs, tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    assert cli("report", runs[1], "--out", first).exit_code == 0
    assert cli("report", runs[1], "--out", second).exit_code == 0
    for name in PLOTS:
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_report_copes_with_a_run_where_nothing_completed(runs, tmp_path):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    for name in ("summary.json", "scenario.yaml"):
        (run_dir / name).write_bytes((runs[0] / name).read_bytes())
    for table in ("requests", "steps"):
        header = (runs[0] / f"{table}.csv").read_text().splitlines()[0]
        (run_dir / f"{table}.csv").write_text(header + "\n")
    result = cli("report", run_dir)
    assert result.exit_code == 0, result.output
    assert all((run_dir / "plots" / name).read_bytes().startswith(PNG_MAGIC) for name in PLOTS)


def test_report_errors_are_one_line_exit_2(runs, tmp_path):
    assert_usage_error(cli("report", tmp_path / "nope"), "no such folder")
    assert_usage_error(cli("report", tmp_path), "no summary.json")
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "summary.json").write_text("{}")
    assert_usage_error(cli("report", partial), "no requests.csv or requests.parquet")
    (partial / "requests.csv").write_text("id,arrival_s\nr0,0.1\n")
    assert_usage_error(cli("report", partial), "missing columns: first_token_s")


def test_report_without_matplotlib_says_how_to_install(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    result = cli("report", runs[0], "--out", tmp_path / "p")
    assert_usage_error(result, "install blis-simpy[plots]")
    assert not (tmp_path / "p").exists()


def test_matplotlib_is_not_imported_with_blis_simpy():
    code = ("import sys, blis_simpy, blis_simpy.cli, blis_simpy.report.plots, "
            "blis_simpy.report.compare; assert 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_kv_utilisation_falls_back_to_blocks_without_scenario(runs, tmp_path):
    steps = pd.read_csv(runs[0] / "steps.csv")
    with_total = plots.instances(steps, 2000).axes[2]
    without = plots.instances(steps, None).axes[2]
    assert with_total.get_ylabel() == "KV utilisation (%)"
    assert without.get_ylabel() == "KV blocks used"
    assert with_total.get_ylim() == (-2, 100)


def sixteen_instances() -> pd.DataFrame:
    """Two steps on each of 16 instances, listed in the csv's (string) order."""
    names = sorted(f"instance_{i}" for i in range(16))  # instance_0, instance_1, instance_10...
    return pd.DataFrame([
        {"instance": name, "start_s": t, "duration_ms": 5.0, "decode_requests": 1,
         "batch_size": 1 + i % 3, "kv_blocks_used": 10 * i, "queue_depth": i % 4}
        for i, name in enumerate(names) for t in (0.0, 0.01)])


def test_instance_legend_is_in_numeric_order():
    axes = plots.instances(sixteen_instances(), 2000).axes
    legend = axes[0].figure.legends[0]
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [f"instance_{i}" for i in range(16)]
    for ax in axes:
        assert [line.get_label() for line in ax.get_lines()] == [
            f"instance_{i}" for i in range(16)]


def test_sixteen_instances_get_sixteen_distinct_colour_and_style_pairs():
    from matplotlib.colors import to_hex

    for ax in plots.instances(sixteen_instances(), 2000).axes:
        pairs = {(to_hex(line.get_color()), line.get_linestyle()) for line in ax.get_lines()}
        assert len(pairs) == 16
    # The same instance has the same look in every panel.
    looks = [[(to_hex(line.get_color()), line.get_linestyle()) for line in ax.get_lines()]
             for ax in plots.instances(sixteen_instances(), None).axes]
    assert looks[0] == looks[1] == looks[2]


@pytest.mark.parametrize(("names", "ordered"), [
    (["instance_10", "instance_2", "instance_1"], ["instance_1", "instance_2", "instance_10"]),
    (["b2", "a10", "a9", "a"], ["a", "a9", "a10", "b2"]),
    (["x_1_10", "x_1_9", "x_0_20"], ["x_0_20", "x_1_9", "x_1_10"]),
])
def test_natural_key_orders_numbers_by_value(names, ordered):
    assert sorted(names, key=plots.natural_key) == ordered


def test_throughput_counts_every_output_token_once(runs):
    requests = pd.read_csv(runs[0] / "requests.csv")
    steps = pd.read_csv(runs[0] / "steps.csv")
    edges = plots.bin_edges(3.5, plots.bin_width(3.5))
    tokens = plots.tokens_per_bin(requests, steps, edges)
    assert tokens.sum() == requests["generated_tokens"].sum()


@pytest.mark.parametrize(("span", "width"), [(0.0, 1.0), (3.0, 0.1), (5.0, 0.2), (12.0, 0.5),
                                             (29.0, 1.0), (3600.0, 1.0)])
def test_bins_are_one_second_or_adaptive_for_short_runs(span, width):
    assert plots.bin_width(span) == pytest.approx(width)
    edges = plots.bin_edges(span, plots.bin_width(span))
    assert edges[0] == 0 and edges[-1] >= span and np.all(np.diff(edges) > 0)


def test_latency_cdf_labels_the_unnamed_slo_class_default():
    frame = pd.DataFrame({"slo_class": ["batch", np.nan, "", "batch"], "x": [1, 2, 3, 4]})
    assert [(label, len(rows)) for label, rows in plots.slo_classes(frame)] == [
        ("default", 2), ("batch", 2)]


# --- compare --------------------------------------------------------------------------------

def test_compare_prints_key_a_b_and_ratio(runs):
    slow, fast = runs
    a = json.loads((slow / "summary.json").read_text())
    b = json.loads((fast / "summary.json").read_text())
    result = cli("compare", slow, fast)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("key ")):]
    rows = {line.split()[0]: line.split() for line in lines}
    assert rows["key"] == ["key", "A", "B", "B/A"]
    ratio = b["responses_per_sec"] / a["responses_per_sec"]
    assert rows["responses_per_sec"] == [
        "responses_per_sec", cell(a["responses_per_sec"]), cell(b["responses_per_sec"]),
        f"{ratio:.6g}"]
    assert rows["completed_requests"][1:] == ["60", "60", "1"]
    assert rows["preemption_count"] == ["preemption_count", "0", "0"]  # A is 0: no ratio
    assert "instances" not in rows  # the nested per-instance list is skipped


def test_compare_json(runs):
    result = cli("compare", *runs, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_key = {row["key"]: row for row in data["rows"]}
    row = by_key["ttft_mean_ms"]
    assert row["ratio"] == pytest.approx(row["b"] / row["a"])
    assert by_key["instance_id"]["ratio"] is None


def saturated_copy(run: Path, folder: Path) -> Path:
    """The run's folder with its summary saying saturated, overloaded, with one warning."""
    import shutil

    shutil.copytree(run, folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary["saturation"].update(verdict="saturated", level="OVERLOADED")
    summary["warnings"] = ["saturated: offered 39.7 req/s, served 15.6 req/s"]
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_compare_shows_each_runs_saturation_verdict_level_and_warnings(runs, tmp_path):
    stable = runs[0]
    saturated = saturated_copy(runs[1], tmp_path / "cap-2")
    text = cli("compare", saturated, stable)
    assert text.exit_code == 0, text.output
    head = text.stdout.splitlines()[:3]
    assert head[0].endswith("saturation saturated (OVERLOADED), 1 warning")
    assert head[1] == "   warning: saturated: offered 39.7 req/s, served 15.6 req/s"
    verdict = json.loads((stable / "summary.json").read_text())["saturation"]["verdict"]
    assert f"saturation {verdict} (" in head[2]
    data = json.loads(cli("compare", saturated, stable, "--json").stdout)
    assert data["state_a"] == {"verdict": "saturated", "level": "OVERLOADED",
                               "warnings": ["saturated: offered 39.7 req/s, served 15.6 req/s"],
                               "window": "whole run"}
    assert data["state_b"]["verdict"] == verdict
    pytest.importorskip("bokeh")
    page = tmp_path / "cmp.html"
    assert cli("compare", saturated, stable, "--html", page).exit_code == 0
    html = page.read_text()
    assert "OVERLOADED" in html and "served 15.6 req/s" in html


def test_compare_says_when_the_runs_were_measured_over_different_windows(runs, tmp_path):
    """A windowed run against a whole-run one: each run's window is on its line and a warning
    says the two cover different spans (their counts and rates are not like for like)."""
    import shutil

    windowed = tmp_path / "windowed"
    shutil.copytree(runs[1], windowed)
    text = (windowed / "scenario.yaml").read_text()
    data = yaml.safe_load(text)
    data["evaluation"]["window"] = {"warmup_s": 0.5, "end_s": 2.0}
    (windowed / "scenario.yaml").write_text(yaml.safe_dump(data))
    out = cli("compare", runs[0], windowed)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert "window whole run; saturation" in lines[0]
    assert "window 0.5-2 s; saturation" in lines[1]
    assert any(line.startswith("warning: A and B were measured over different windows "
                               "(whole run and 0.5-2 s)") for line in lines)
    same = cli("compare", runs[0], runs[1])
    assert "different windows" not in same.stdout
    assert json.loads(cli("compare", runs[0], windowed, "--json").stdout)["windows_differ"]


def test_compare_keys_missing_from_one_side_and_formatting():
    rows = compare({"x": 3.14159265, "only_a": 1, "flag": True, "n": None},
                   {"x": 6.2831853, "only_b": "s", "flag": False, "n": 2})
    assert [r.key for r in rows] == ["x", "only_a", "flag", "n", "only_b"]
    x, only_a, flag, n, only_b = rows
    assert (cell(x.a), cell(x.b), cell(x.ratio)) == ("3.14159", "6.28319", "2")
    assert only_a.ratio is None and cell(only_a.b, only_a.b_present) == "-"
    assert cell(only_b.a, only_b.a_present) == "-" and cell(only_b.b) == "s"
    assert flag.ratio is None and cell(flag.a) == "true"
    assert n.ratio is None and cell(n.a) == "null"


def test_compare_errors_are_one_line_exit_2(runs, tmp_path):
    assert_usage_error(cli("compare", runs[0], tmp_path / "nope"), "no such folder")
    assert_usage_error(cli("compare", tmp_path, runs[0]), "no summary.json")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text("[1, 2]")
    assert_usage_error(cli("compare", runs[0], bad), "not a JSON object")
