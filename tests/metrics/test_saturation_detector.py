"""Issue 35 item 6: the saturation detector labels each run and each window of its measured
span STABLE, BACKLOGGED or OVERLOADED from queue growth and throughput (metrics/saturation.py),
in summary.json `saturation.level` / `.windows`, the warnings, the trace summary's Load line
and as `overload` anomalies.

Definitions checked:
* a window is OVERLOADED when the requests waiting grew by more than 2 % of its offered rate
  with a queue (10 requests and 1 % of the run's arrivals) at its end, BACKLOGGED with such a
  queue that did not grow, STABLE otherwise;
* the run is OVERLOADED exactly when the verdict is `saturated`, else BACKLOGGED when a window
  was not STABLE or a queue stands at the end, else STABLE; no level when undetermined;
* windows tile the measured span (`evaluation.saturation.window_s`, default a tenth of it);
* each stretch of OVERLOADED windows is one `overload` anomaly spanning it.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.api import run
from blis_simpy.cli import app
from blis_simpy.compat.convert import blis_command
from blis_simpy.config.library import scenario_file
from blis_simpy.config.scenario import MeasurementWindow, Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.saturation import (
    BACKLOGGED,
    OVERLOADED,
    STABLE,
    Timelines,
    overloads,
    saturation,
)
from blis_simpy.metrics.trace.summary import level_note
from blis_simpy.metrics.window import Window
from blis_simpy.sim.output import OutputFolder
from blis_simpy.sim.run import prepare, simulate
from tests.compat.helpers import COEFFS, LLAMA

WHOLE = Window.of(MeasurementWindow())


def queue(arrivals_per_s: list[float], service_per_s: list[float], seconds: int = 60
          ) -> Timelines:
    """A FIFO server taking one request at a time, spaced by 1 / its service rate: arrivals
    evenly spaced at a rate per 10-second stretch; a request leaves the queue (enters service
    and completes) at its turn, if that comes before the end."""
    arrived: list[int] = []
    for second in range(seconds):
        rate = int(arrivals_per_s[second // 10])
        arrived += [second * US_PER_S + k * US_PER_S // rate for k in range(rate)]
    left, free = [], 0
    for t in arrived:
        at = max(t, free)
        if at >= seconds * US_PER_S:
            break
        left.append(at)
        free = at + int(US_PER_S / max(service_per_s[min(at // US_PER_S, seconds - 1) // 10],
                                       1e-9))
    left_at = np.full(len(arrived), -1, dtype=np.int64)
    left_at[: len(left)] = left
    arrival = np.array(arrived, dtype=np.int64)
    return Timelines(arrival, left_at, left_at.copy(), left_at.copy(), WHOLE)


def judged(timeline: Timelines, window_s: float | None = None) -> dict:
    return saturation(timeline, WHOLE, lambda: (None, "none"), window_s)


def test_a_steady_load_below_service_is_stable_in_every_window():
    verdict = judged(queue([20] * 6, [30] * 6))
    assert verdict["verdict"] == "sustainable" and verdict["level"] == STABLE
    assert {w["level"] for w in verdict["windows"]} == {STABLE}
    assert overloads(verdict) == []


def test_an_overload_mid_run_that_drains_is_overloaded_then_backlogged():
    # 20/s served at 30/s; 50/s from 20 to 30 s (queue +20/s); drained by ~50 s
    verdict = judged(queue([20, 20, 50, 20, 20, 20], [30] * 6), window_s=5)
    levels = [w["level"] for w in verdict["windows"]]
    assert levels[:4] == [STABLE] * 4
    assert levels[4:6] == [OVERLOADED] * 2
    assert BACKLOGGED in levels[6:] and levels[-1] == STABLE
    assert verdict["verdict"] == "sustainable" and verdict["level"] == BACKLOGGED
    grew = verdict["windows"][4]
    assert grew["offered_rate_per_s"] == pytest.approx(50)
    assert grew["served_rate_per_s"] == pytest.approx(30)
    assert grew["queue_growth_per_s"] == pytest.approx(20, rel=0.1)
    [anomaly] = overloads(verdict)
    assert (anomaly.type, anomaly.time, anomaly.end) == ("overload", 20 * US_PER_S,
                                                         30 * US_PER_S)
    assert anomaly.severity == pytest.approx(0.4, rel=0.1)  # grew by ~40 % of the offered
    assert "OVERLOADED at 20-30 s" in level_note(verdict)


def test_a_run_that_stays_overloaded_is_overloaded_and_saturated():
    verdict = judged(queue([20, 20, 20, 50, 50, 50], [30] * 6))
    assert verdict["verdict"] == "saturated" and verdict["level"] == OVERLOADED
    assert verdict["windows"][-1]["level"] == OVERLOADED


def test_a_standing_queue_that_does_not_grow_is_backlogged():
    # 120/s for the first 10 s, then the queue that built is served as fast as new work
    # arrives: it stays, neither growing nor shrinking
    verdict = judged(queue([120, 20, 20, 20, 20, 20], [30, 20, 20, 20, 20, 20]))
    assert verdict["level"] == BACKLOGGED and verdict["verdict"] == "sustainable"
    assert {w["level"] for w in verdict["windows"][2:]} == {BACKLOGGED}
    [anomaly] = overloads(verdict)  # the first 10 s only
    assert anomaly.time == 0 and anomaly.end <= 12 * US_PER_S


def test_too_few_arrivals_give_no_level():
    verdict = judged(queue([1, 1, 0, 0, 0, 0], [30] * 6))
    assert verdict["verdict"] == "undetermined"
    assert "level" not in verdict and "windows" not in verdict
    assert level_note(verdict) == ""


rates = st.lists(st.integers(0, 60), min_size=6, max_size=6)


@settings(max_examples=60, deadline=None)
@given(rates, rates, st.one_of(st.none(), st.floats(0.5, 30)))
@example([0, 0, 2, 18, 60, 60], [0] * 6, 1.0)  # waiting at the end exactly at the floor
def test_windows_tile_the_span_and_levels_follow_their_definitions(arrive, serve, window_s):
    verdict = judged(queue([float(a) for a in arrive], [float(s) for s in serve]), window_s)
    if verdict["verdict"] == "undetermined":
        assert "level" not in verdict
        return
    windows = verdict["windows"]
    assert windows[0]["span_s"][0] == verdict["span_s"][0]
    assert windows[-1]["span_s"][1] == pytest.approx(verdict["span_s"][1])
    for before, after in pairwise(windows):
        assert before["span_s"][1] == after["span_s"][0]
    floor = max(10, 0.01 * (sum(arrive) * 10))  # 1 % of the arrivals, as the detector counts
    for w in windows:
        queued = w["waiting_at_end"] >= floor
        grew = w["queue_growth_per_s"] > max(0.0, 0.02 * w["offered_rate_per_s"])
        assert w["level"] == (OVERLOADED if queued and grew else
                              BACKLOGGED if queued else STABLE)
    assert (verdict["level"] == OVERLOADED) == (verdict["verdict"] == "saturated")
    if verdict["level"] == STABLE:
        assert all(w["level"] == STABLE for w in windows)
    assert len(overloads(verdict)) <= sum(w["level"] == OVERLOADED for w in windows)


def test_a_tiny_window_is_widened_to_a_thousandth_of_the_span():
    verdict = judged(queue([20] * 6, [30] * 6), window_s=1e-6)
    assert len(verdict["windows"]) == 1000


# ---- the library scenario and the outputs


@pytest.fixture(scope="module")
def surge():
    return run("saturation-detector")


def test_the_library_scenario_goes_overloaded_mid_way_and_is_flagged(surge):
    verdict = surge.summary["saturation"]
    assert verdict["verdict"] == "sustainable"  # the run-level verdict alone misses it
    assert verdict["level"] == BACKLOGGED
    overloaded = [w for w in verdict["windows"] if w["level"] == OVERLOADED]
    assert overloaded and all(14 <= w["span_s"][0] < 30 for w in overloaded)
    assert verdict["windows"][0]["level"] == STABLE
    rows = surge.anomalies[surge.anomalies["type"] == "overload"]
    assert len(rows) >= 1 and 15 <= rows["time_s"].min() < 27
    assert surge.metrics["anomalies"]["overload"] == len(rows)
    assert any(w.startswith("overloaded at ") for w in surge.summary["warnings"])
    assert "level BACKLOGGED (OVERLOADED at " in surge.summary_text()


def test_without_the_surge_every_window_is_stable():
    calm = run("saturation-detector", overrides={"workload.load_profile": None})
    verdict = calm.summary["saturation"]
    assert verdict["level"] == STABLE
    assert {w["level"] for w in verdict["windows"]} == {STABLE}
    assert "overload" not in calm.metrics["anomalies"]


def test_a_streamed_run_labels_the_same_windows(surge, tmp_path):
    sim = prepare(scenario_file("saturation-detector"))
    streamed = simulate(sim, folder=OutputFolder(tmp_path / "out", "csv"),
                        record_mode="stream")
    assert streamed.summary["saturation"]["windows"] == surge.summary["saturation"]["windows"]
    assert streamed.summary["saturation"]["level"] == BACKLOGGED


# ---- the scenario key


@pytest.mark.parametrize("bad", [0, -1, "soon", 1e12])
def test_a_bad_window_length_names_the_key(bad):
    data = Scenario.from_yaml(scenario_file("saturation-detector")).to_dict()
    data["evaluation"]["saturation"] = {"window_s": bad}
    with pytest.raises(ScenarioError, match=r"evaluation\.saturation\.window_s"):
        Scenario.from_dict(data)


def test_an_unknown_key_is_refused_on_the_command_line(tmp_path):
    result = CliRunner().invoke(app, ["run", "saturation-detector", "--out",
                                      str(tmp_path / "o"), "--set",
                                      "evaluation.saturation.windows=3"])
    assert result.exit_code == 2
    assert "evaluation.saturation.windows" in result.output
    assert "Traceback" not in result.output


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=5), st.none(),
                 st.lists(st.integers(), max_size=2)))
def test_window_lengths_are_accepted_or_refused_by_name(value):
    data = {"version": 1, "name": "w", "model": {"name": "meta-llama/llama-3.1-8b-instruct",
                                                 "gpu": "H100", "tp": 1},
            "workload": {"type": "distribution", "num_requests": 10},
            "evaluation": {"saturation": {"window_s": value}}}
    try:
        scenario = Scenario.from_dict(data)
    except ScenarioError as err:
        assert "evaluation.saturation.window_s" in str(err)
    else:
        window_s = scenario.evaluation.saturation.window_s
        assert window_s is None or window_s > 0


# ---- the reference head's flags (convert blis-command; one case per flag in
# tests/compat/test_head_flags.py)


def test_a_converted_detectors_command_runs_with_the_final_window_as_its_windows():
    data = blis_command(["run", "--model", LLAMA, *COEFFS, "--num-requests", "200",
                         "--rate", "40", "--detectors", "composite",
                         "--saturation-final-window", "1s"])
    assert data["compat"] == "blis"
    verdict = run(Scenario.from_dict(data)).summary["saturation"]
    assert verdict["level"] in (STABLE, BACKLOGGED, OVERLOADED)
    lengths = [w["span_s"][1] - w["span_s"][0] for w in verdict["windows"]]
    assert lengths[:-1] == pytest.approx([1.0] * (len(lengths) - 1))


def test_the_cli_refuses_the_threshold_detector_naming_the_flag():
    result = CliRunner().invoke(app, ["convert", "blis-command", "--", "run", "--model", LLAMA,
                                      *COEFFS, "--detectors", "threshold"])
    assert result.exit_code == 2
    assert "--detectors" in result.output and "SLO target" in result.output
    assert "Traceback" not in result.output
