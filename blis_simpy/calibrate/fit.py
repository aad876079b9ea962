"""Calibration: fit the physical step-time model's coefficients (engine/physical.py) to the
per-stage means of real runs (`blis-simpy calibrate`).

Given a schedule, a request's TTFT and its decode time are sums of the durations of the steps
it lived through (the parts of them it overlapped), and a step's duration is beta . features.
So for a simulated stage the mean TTFT and the mean ITL are linear in beta:

    mean TTFT = a0 + mean_i [F(first token_i) - F(queued_i)] . beta
    mean ITL  = mean_i [F(completion_i) - F(first token_i)] / (output_len - 1) . beta

where F(t) is the step features accumulated up to time t (a step's features accrue evenly over
its duration) and a0 is the fixed per-request delay before a request reaches the engine's
queue (alpha[0]: the API server, tokenisation; it does not hold the engine). Each fitted stage
gives two such equations, each divided by its measurement so the fit weighs relative errors;
the non-negative least-squares solution is the new (a0, beta). The schedule depends on them
(batches grow when steps slow down), so simulate -> fit is repeated, half-way steps, until
they settle. Stages whose client timed out (censored) are never fitted, and an equation is
left out of a round while the simulation of its stage is queueing without bound (not linear).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.alpha import batch_shape
from blis_simpy.engine.physical import TERMS, PhysicalLatency
from blis_simpy.sim.run import prepare, simulate
from blis_simpy.validate.ground_truth import Experiment, Stage
from blis_simpy.validate.harness import Latency, fell_behind, stage_scenario

ROUNDS = 8
QUEUEING = 2.0
FIT_SECONDS = 120.0  # of each stage's arrivals simulated while fitting (the report runs all)
SETTLED = 0.01  # stop when no coefficient moved by more than 1 % of the step-time scale
# The physics the fit starts from: memory traffic runs at the achievable share of HBM bandwidth
# (85 %, docs/roofline.md), so the coefficients of the weights and the KV reads are near
# 1 / 0.85. One soft equation per term says so, weighing like a stage missed by PRIOR_WEIGHT
# when the coefficient is off by 100 %: a few stages of one kind (small batches, short
# contexts) cannot then move a term they hardly exercise far from the physics.
BANDWIDTH_PRIOR = {TERMS.index("weights"): 1 / 0.85, TERMS.index("kv_reads"): 1 / 0.85}
PRIOR_WEIGHT = 0.5


class RecordingLatency:
    """A physical latency model that also keeps every step's feature vector, in step order."""

    def __init__(self, model: PhysicalLatency) -> None:
        self.model = model
        self.output_delay = model.output_delay
        self.per_request = True
        self.features: list[tuple[float, ...]] = []

    def queue_delay(self, input_len: int) -> int:
        return self.model.queue_delay(input_len)

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        x = self.model.physics.features(*batch_shape(batch))
        self.features.append(x)
        return int(sum(b * v for b, v in zip(self.model.beta, x, strict=True))) + extra_us


@dataclass(frozen=True, slots=True)
class StageRows:
    """The two linear equations a simulated stage gives: row . beta = measured (µs)."""
    stage: Stage
    ttft: np.ndarray  # without the fixed per-request delay a0
    itl: np.ndarray
    kept_up: bool  # the simulated server kept up (a queue that grows without bound is not linear)


@dataclass(frozen=True, slots=True)
class Fitted:
    """A calibrated physical model: the per-request delay a0 (µs) and the step coefficients."""
    a0: float
    beta: tuple[float, ...]

    @property
    def latency(self) -> Latency:
        return Latency({"type": "physical", "alpha": [self.a0, 0.0, 0.0],
                        "beta": list(self.beta)}, "calibrated physical")


# Where the fit starts: no fixed costs, the weights/compute/KV terms at the bundled H100
# efficiencies (1 / 0.72 bandwidth, 1 / 0.65 prefill MFU), the bundled 20 µs all-reduce.
START = Fitted(0.0, (0.0, 1 / 0.72, 1 / 0.65, 1 / 0.72, 0.0, 20.0))


def stage_rows(exp: Experiment, stage: Stage, model: Fitted, seed: int,
               max_duration_s: float | None) -> StageRows:
    sim = prepare(stage_scenario(exp, stage, model.latency, seed, max_duration_s))
    instances = list(sim.fleet)
    if len(instances) != 1 or not isinstance(instances[0].latency, PhysicalLatency):
        raise ScenarioError(stage.name, "calibration needs one instance with the physical model")
    recorder = RecordingLatency(instances[0].latency)
    instances[0].latency = recorder
    result = simulate(sim)
    steps = result.steps
    x = np.array(recorder.features, dtype=float).reshape(-1, len(TERMS))
    start = steps["start_s"].to_numpy() * US_PER_S
    duration = np.maximum(steps["duration_ms"].to_numpy() * 1e3, 1e-9)
    if len(start) != len(x):
        raise ScenarioError(stage.name, "steps and recorded features differ in number")
    before = np.vstack([np.zeros(len(TERMS)), np.cumsum(x, axis=0)])[:-1]

    def accrued(t_s: np.ndarray) -> np.ndarray:
        t = t_s * US_PER_S
        k = np.searchsorted(start, t, side="right") - 1
        inside = k >= 0
        k = np.maximum(k, 0)
        frac = np.clip((t - start[k]) / duration[k], 0.0, 1.0)
        return np.where(inside[:, None], before[k] + frac[:, None] * x[k], 0.0)

    done = result.requests[result.requests["final_state"] == "completed"]
    queued = accrued(done["queued_s"].to_numpy())
    first = accrued(done["first_token_s"].to_numpy())
    end = accrued(done["completion_s"].to_numpy())
    arrivals = result.requests["arrival_s"]
    kept_up = not fell_behind(stage, float(arrivals.max() - arrivals.min()),
                              float(done["completion_s"].max() - arrivals.max()))
    return StageRows(stage, (first - queued).mean(axis=0),
                     (end - first).mean(axis=0) / max(stage.output_len - 1, 1), kept_up)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every set of free coefficients (exact, and cheap
    for six terms: 63 small least-squares solves; numpy only)."""
    n = a.shape[1]
    best, best_cost = np.zeros(n), float(np.sum(b * b))
    for size in range(1, n + 1):
        for free in itertools.combinations(range(n), size):
            cols = list(free)
            sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(sol < 0):
                continue
            cost = float(np.sum((a[:, cols] @ sol - b) ** 2))
            if cost < best_cost - 1e-12:
                full = np.zeros(n)
                full[cols] = sol
                best, best_cost = full, cost
    return best


def fit(pairs: Sequence[tuple[Experiment, Stage]], seed: int = 42,
        max_duration_s: float | None = None,
        progress: Callable[[int, Fitted, int], None] | None = None) -> Fitted:
    """The physical model fitted to the stages' mean TTFT and mean ITL."""
    usable = [(exp, stage) for exp, stage in pairs if not stage.censored]
    if not usable:
        raise ScenarioError("--fit", "no uncensored stage to fit")
    model = START
    for round_ in range(ROUNDS):
        rows = [stage_rows(exp, stage, model, seed, max_duration_s) for exp, stage in usable]
        a, used = equations(rows, model)
        prior_rows, prior_rhs = bandwidth_prior(a.shape[1])
        solution = nnls(np.vstack([a, prior_rows]), np.concatenate([np.ones(len(a)), prior_rhs]))
        current = np.array((model.a0, *model.beta))
        step = solution - current if round_ == 0 else 0.5 * (solution - current)
        scale = np.abs(a).max(axis=0) + 1e-12  # how much each coefficient moves a metric
        moved = float(np.max(np.abs(step) * scale))
        new = current + step
        model = Fitted(float(new[0]), tuple(float(b) for b in new[1:]))
        if progress:
            progress(round_, model, used)
        if moved < SETTLED and used == 2 * len(rows):
            break
    return model


def bandwidth_prior(columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The soft equations coefficient / physics = 1 (columns: a0, then beta)."""
    rows = np.zeros((len(BANDWIDTH_PRIOR), columns))
    for i, (term, value) in enumerate(sorted(BANDWIDTH_PRIOR.items())):
        rows[i, 1 + term] = PRIOR_WEIGHT / value
    return rows, np.full(len(BANDWIDTH_PRIOR), PRIOR_WEIGHT)


def equations(rows: Sequence[StageRows], model: Fitted) -> tuple[np.ndarray, int]:
    """The relative equations (columns a0, beta...) of the stages in their linear regime: an
    ITL equation when the simulated stage kept up, a TTFT equation when its simulated TTFT is
    also within a factor QUEUEING of the measurement (beyond, it is a queue, not a few steps)."""
    beta = np.array(model.beta)
    out = []
    for r in rows:
        if not r.kept_up:
            continue
        ttft = r.stage.measured.ttft_ms * 1e3
        out.append(np.concatenate(([0.0], r.itl)) / (r.stage.measured.itl_ms * 1e3))
        if model.a0 + float(r.ttft @ beta) < QUEUEING * ttft:
            out.append(np.concatenate(([1.0], r.ttft)) / ttft)
    if not out:
        raise ScenarioError("--fit", "no fitted stage kept up in the simulation")
    return np.array(out), len(out)


def catalog_entry(model: Fitted, fitted_on: Sequence[str], source: str) -> str:
    """The YAML catalog entry: a `latency:` section any scenario can use, with its origin."""
    names = ", ".join(TERMS)
    beta = ", ".join(f"{b:.6g}" for b in model.beta)
    workloads = ", ".join(fitted_on)
    return (f"# blis-simpy calibrate: the physical step-time model fitted to the {workloads}"
            f" stages of {source}.\n"
            f"# alpha[0]: fixed per-request delay before the engine queue (µs); beta: {names}\n"
            "latency:\n  type: physical\n"
            f"  alpha: [{model.a0:.6g}, 0, 0]\n  beta: [{beta}]\n")
