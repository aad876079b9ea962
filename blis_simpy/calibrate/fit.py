"""Fitting the physical step model's coefficients (engine/physical.py) to measured stages
(`blis-simpy calibrate`, the shipped sets in data/step_models/, the cross-validation of
`validate-real --cv`).

Given a schedule, every latency the client measures is linear in the coefficients: a request's
TTFT is its API-server delay (a sum of the API work queued ahead of it, config/step_models.py)
plus the durations of the steps it waited through, and a step's duration is coefficients .
quantities (the longer of the weights and the GEMMs is the one that counts). So a simulated
stage gives, for each statistic the client measured (mean or median TTFT, TPOT or ITL, E2E,
and the duration of a saturated stage), one linear equation in the coefficients, divided by
the measurement so that the fit weighs relative errors. Stacked with one soft equation per
coefficient saying it is near its physical prior, the non-negative least-squares solution is
the next estimate; simulate and fit alternate until the coefficients settle, each round
moving 1/(round + 1) of the way (a step whose binding term flips between the weights and the
GEMMs would otherwise make a coefficient oscillate).

A coefficient is *identified* when the data constrain it more than its prior does: the sum of
the squared shares of the fitted metrics it would explain at its prior exceeds the prior's
weight squared. One
that is not stays near its prior, and the fit says so: a term the data never exercise (an
uncached prefill's compute, when every fitted prompt was a cache hit) is not a term that is
zero.

The GPU's kernels are the same whichever server drives them, so the kernel multipliers
(weights, KV reads, GEMMs, attention, all-reduces, link) are one set for all families; the
host costs (per step, per request, the API server) are fitted per server family.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from blis_simpy.config import hardware as gpus
from blis_simpy.config.step_models import HOST, KERNEL, NAMES, StepCoefficients
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.physical import ApiServer, PhysicalLatency, emitted, step_us
from blis_simpy.sim.run import prepare, simulate
from blis_simpy.validate.harness import (
    FIT_REQUESTS,
    Latency,
    headline,
    measured_requests,
    reduce,
    stage_scenario,
)
from blis_simpy.validate.sets import Stage

# The physics each coefficient starts from and how firmly (the weight of its soft equation,
# in units of a fitted metric missed by 100 %). Kernel multipliers: 1.0, as fast as
# microbenchmarks reach (config/hardware.py), held as firmly as a stage missed by 50 %. Host
# costs: typical magnitudes of a Python serving stack (a few ms to parse, template and
# tokenise a request; about 0.1 ms to detokenise and stream one token), held more loosely:
# the data should decide. The API server's costs act only when it queues, so a prior far below
# the truth would leave them with no gradient to climb.
PRIORS: dict[str, tuple[float, float]] = {
    "weights": (1.0, 0.5), "kv_reads": (1.0, 0.5), "gemm": (1.0, 0.5),
    "attention": (1.0, 0.5), "allreduce": (1.0, 0.5), "link": (1.0, 0.5),
    "step_us": (1000.0, 0.3), "request_us": (25.0, 0.3), "api_fixed_us": (5000.0, 0.3),
    "api_request_us": (5000.0, 0.3), "api_input_token_us": (1.0, 0.3),
    "api_output_token_us": (100.0, 0.3), "intake_steps": (0.5, 0.3),
    # A layer run outside captured graphs: about ten kernels launched from Python at ~5 µs of
    # host time each, about half of it hidden behind the GPU's work on them.
    "graph_layer_us": (30.0, 0.3),
}
ROUNDS = 6
SETTLED = 0.02  # stop when no coefficient moved by more than 2 % of its prior
QUEUEING = 3.0  # a simulated latency this many times the measured one is a queue, not steps
TIE = 0.5  # how firmly a GPU's kernel multiplier is held to another GPU's (tie_rows)


def prior_coefficients() -> StepCoefficients:
    return StepCoefficients(**{name: value for name, (value, _) in PRIORS.items()})


# ---- recording one simulated stage -----------------------------------------------------------

class LinearApi(ApiServer):
    """The API server, also keeping when it is free as a linear form in its coefficients:
    [constant µs, requests, prompt tokens, streamed tokens] (exact for this schedule)."""

    def __init__(self, c: StepCoefficients) -> None:
        super().__init__(c)
        self.form = np.zeros(4)
        self.last_delay = np.zeros(4)

    def settle(self, now: float) -> None:
        if 0.0 <= self.pending_at <= now:
            if self.free_at < self.pending_at:
                self.form = np.array([self.pending_at, 0.0, 0.0, 0.0])
            self.form[3] += self.pending_tokens
        super().settle(now)

    def arrive(self, now: float, input_len: int) -> float:
        self.settle(now)
        if self.free_at < now:
            self.form = np.array([now, 0.0, 0.0, 0.0])
        self.form[1] += 1.0
        self.form[2] += input_len
        delay = super().arrive(now, input_len)
        self.last_delay = self.form - np.array([now, 0.0, 0.0, 0.0])
        return delay


class RecordingLatency(PhysicalLatency):
    """The physical model of one instance, recording every step's quantities and every
    request's delay before the engine queue as a linear form (its API-server part, and the
    intake lag behind a running step: k x that step's duration, linearised in k and in the
    step's coefficients)."""

    def __init__(self, model: PhysicalLatency) -> None:
        super().__init__(model.shape, model.c, model.clock)
        self.linear = LinearApi(model.c)
        self.api = self.linear
        self.steps: list[tuple[list[float], bool]] = []
        self.delays: dict[tuple[int, int], list[Form]] = {}
        self.cvec = np.array([getattr(model.c, n) for n in NAMES])

    def queue_delay(self, input_len: int) -> int:
        assert self.clock is not None
        now = float(self.clock.now)
        api = self.linear.arrive(now, input_len)
        d = self.linear.last_delay
        vector = np.zeros(len(NAMES))
        vector[INDEX["api_request_us"]] = d[1]
        vector[INDEX["api_input_token_us"]] = d[2]
        vector[INDEX["api_output_token_us"]] = d[3]
        vector[INDEX["api_fixed_us"]] = 1.0
        form = Form(vector, float(d[0]))
        delay = api
        if now < self.step_ends and self.steps:
            k = self.c.intake_steps
            row = step_row(*self.steps[-1])
            lag = np.zeros(len(NAMES))
            lag[INDEX["intake_steps"]] = self.step_duration
            form = form + Form(lag + k * row, -k * float(row @ self.cvec))
            delay += k * self.step_duration
        self.delays.setdefault((int(now), input_len), []).append(form)
        return int(delay)

    def bulk_step_time(self, batch: Sequence, decoders: int, context: int, extra_us: int
                       ) -> int:
        """Every step, the exact path's (`step_time` calls this) and the steady path's."""
        assert self.clock is not None
        q = self.shape.quantities(batch, decoders, context)
        c = self.c
        self.steps.append((q, c.gemm * q[4] > c.weights * q[2]))
        duration = int(step_us(q, c)) + extra_us
        now = float(self.clock.now)
        self.api.stream(now, now + duration, emitted(batch) + decoders)
        self.step_ends, self.step_duration = now + duration, float(duration)
        return duration


def step_row(q: list[float], gemm_binds: bool) -> np.ndarray:
    """A step's quantities as a row over the coefficients (the binding linear term only)."""
    row = np.zeros(len(NAMES))
    row[INDEX["step_us"]] = q[0]
    row[INDEX["request_us"]] = q[1]
    row[INDEX["gemm" if gemm_binds else "weights"]] = q[4] if gemm_binds else q[2]
    row[INDEX["kv_reads"]] = q[3]
    row[INDEX["attention"]] = q[5]
    row[INDEX["allreduce"]] = q[6]
    row[INDEX["link"]] = q[7]
    row[INDEX["graph_layer_us"]] = q[8]
    return row


# ---- linear forms ----------------------------------------------------------------------------

INDEX = {name: i for i, name in enumerate(NAMES)}


@dataclass(frozen=True, slots=True)
class Form:
    """A time (µs) as `vector . coefficients + constant`."""
    vector: np.ndarray
    constant: float

    def value(self, c: np.ndarray) -> float:
        return float(self.vector @ c + self.constant)

    def __add__(self, other: Form) -> Form:
        return Form(self.vector + other.vector, self.constant + other.constant)

    def scaled(self, k: float) -> Form:
        return Form(self.vector * k, self.constant * k)


def mean_form(forms: Sequence[Form]) -> Form:
    return Form(np.mean([f.vector for f in forms], axis=0),
                statistics.fmean(f.constant for f in forms))


def median_form(forms: Sequence[Form], c: np.ndarray) -> Form:
    """The form of the median value (a local linearisation of the median)."""
    ordered = sorted(forms, key=lambda f: f.value(c))
    return ordered[len(ordered) // 2]


class Accrual:
    """Step quantities accrued over time: F(t), each step's row spread evenly over it."""

    def __init__(self, rows: np.ndarray, start_us: np.ndarray, duration_us: np.ndarray,
                 c: np.ndarray) -> None:
        self.rows, self.start, self.duration = rows, start_us, np.maximum(duration_us, 1e-9)
        self.before = np.vstack([np.zeros(rows.shape[1]), np.cumsum(rows, axis=0)])[:-1]
        self.c = c

    def at(self, t_us: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.start, t_us, side="right") - 1
        inside = k >= 0
        k = np.maximum(k, 0)
        frac = np.clip((t_us - self.start[k]) / self.duration[k], 0.0, 1.0)
        return np.where(inside[:, None], self.before[k] + frac[:, None] * self.rows[k], 0.0)

    def intervals(self, t0: np.ndarray, t1: np.ndarray) -> list[Form]:
        """The forms of the intervals [t0, t1]: their step quantities, and as the constant
        what the coefficients do not set (idle time, KV loads)."""
        delta = self.at(t1) - self.at(t0)
        constant = (t1 - t0) - delta @ self.c
        return [Form(d, float(k)) for d, k in zip(delta, constant, strict=True)]


@dataclass(frozen=True, slots=True)
class StageFit:
    """A simulated stage's equations: each `form` should equal `target` (µs)."""
    stage: Stage
    equations: list[tuple[str, Form, float]]
    overloaded: bool


def stage_fit(stage: Stage, c: StepCoefficients, seed: int = 42,
              max_requests: int | None = FIT_REQUESTS) -> StageFit:
    """Simulate `stage` with coefficients `c` and write its equations."""
    scenario = stage_scenario(stage, Latency({"type": "physical", "coefficients": stage.server},
                                             "fit"), seed, max_requests)
    sim = prepare(scenario)
    instances = list(sim.fleet)
    if len(instances) != 1 or not isinstance(instances[0].latency, PhysicalLatency):
        raise ScenarioError(stage.key, "calibration needs one instance with the physical model")
    base = instances[0].latency
    recorder = RecordingLatency(PhysicalLatency(base.shape, c, base.clock))
    instances[0].latency = recorder
    result = simulate(sim)
    return StageFit(stage, equations(stage, result, recorder, c), overloaded(stage, result))


def overloaded(stage: Stage, result) -> bool:
    if stage.saturated or stage.load.arrival != "poisson":
        return False
    sim = reduce(stage, result)
    e2e = stage.measured.stat("e2e", "mean") or stage.measured.stat("e2e", "median")
    return e2e is not None and sim["drain_s"] > 2 * e2e / 1e3 + 0.05 * sim["window_s"]


def equations(stage: Stage, result, rec: RecordingLatency, c: StepCoefficients
              ) -> list[tuple[str, Form, float]]:
    cvec = np.array([getattr(c, n) for n in NAMES])
    rows = np.array([step_row(q, binds) for q, binds in rec.steps]).reshape(-1, len(NAMES))
    steps = result.steps
    start = steps["start_s"].to_numpy(dtype=float) * US_PER_S
    duration = steps["duration_ms"].to_numpy(dtype=float) * 1e3
    if len(start) != len(rows):
        raise ScenarioError(stage.key, "steps and recorded quantities differ in number")
    accrual = Accrual(rows, start, duration, cvec)
    done = measured_requests(stage, result.requests)
    us = lambda col: done[col].to_numpy(dtype=float) * US_PER_S  # noqa: E731
    arrival, routed, queued = us("arrival_s"), us("routed_s"), us("queued_s")
    first, completion = us("first_token_s"), us("completion_s")
    api = []
    inputs = done["input_tokens"].to_numpy(dtype=int)
    pending = {key: list(forms) for key, forms in rec.delays.items()}
    for t, n, q_at in zip(routed, inputs, queued, strict=True):
        recorded = pending.get((round(t), int(n)))
        api.append(recorded.pop(0) if recorded else Form(np.zeros(len(NAMES)), float(q_at - t)))
    waits = accrual.intervals(queued, first)
    decode = accrual.intervals(first, completion)
    ttft = [Form(a.vector + w.vector, a.constant + w.constant + (r - t0))
            for a, w, r, t0 in zip(api, waits, routed, arrival, strict=True)]
    e2e = [t + d for t, d in zip(ttft, decode, strict=True)]
    out = done["output_tokens"].to_numpy(dtype=float)
    tpot = [d.scaled(1.0 / (k - 1)) for d, k in zip(decode, out, strict=True) if k > 1]
    forms = {"ttft": ttft, "e2e": e2e, "tpot": tpot}
    sim = reduce(stage, result)
    found: list[tuple[str, Form, float]] = []
    if stage.saturated or stage.load.arrival == "concurrency":
        measured_rps = stage.measured.requests_per_s
        if measured_rps is not None:
            span = accrual.intervals(np.array([arrival.min()]), np.array([completion.max()]))[0]
            found.append(("duration", span, len(done) / measured_rps * US_PER_S))
    if stage.saturated:
        return found
    for metric in ("e2e", "tpot", "ttft"):
        compared = headline(stage, sim, metric)
        if compared is None:
            continue
        target = compared.measured * 1e3
        statistic = compared.statistic
        if statistic.startswith("itl"):
            form = itl_form(steps, rows, duration, cvec, statistic.endswith("median"))
        elif statistic.startswith("(E2E"):
            form = (mean_form(e2e) + mean_form(ttft).scaled(-1.0)).scaled(
                1.0 / max(stage.mean_output - 1, 1))
        else:
            chosen = forms[metric]
            if not chosen:
                continue
            wanted = statistic.split()[-1]
            form = mean_form(chosen) if wanted == "mean" else median_form(chosen, cvec)
        found.append((metric, form, target))
    return found


def itl_form(steps, rows: np.ndarray, duration: np.ndarray, c: np.ndarray, median: bool) -> Form:
    """Per-token gaps: each decoding request's token gap is its step's duration."""
    weights = steps["decode_requests"].to_numpy(dtype=float)
    keep = weights > 0
    if not keep.any():
        return Form(np.zeros(rows.shape[1]), 0.0)
    rows, duration, weights = rows[keep], duration[keep], weights[keep]
    extra = duration - rows @ c
    if median:
        order = np.argsort(duration, kind="stable")
        cumulative = np.cumsum(weights[order])
        k = order[np.searchsorted(cumulative, cumulative[-1] / 2)]
        return Form(rows[k], float(extra[k]))
    share = weights / weights.sum()
    return Form(share @ rows, float(share @ extra))


# ---- the fit ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Fitted:
    """Host coefficients per server family, kernel multipliers per GPU, and what the data
    said about each column (`family.name` or `name@gpu`)."""
    columns: tuple[str, ...]
    values: dict[str, float]
    information: dict[str, float]  # column -> the data's information (squared shares at prior)
    prior_weight: dict[str, float]
    stages: tuple[str, ...]  # the stages fitted (set:name)
    residuals: dict[str, float] = field(default_factory=dict)  # equation -> signed error %

    def identified(self, column: str) -> bool:
        return self.information.get(column, 0.0) >= self.prior_weight[column] ** 2

    def coefficients(self, family: str, gpu: str) -> StepCoefficients:
        return coefficients_of(self.values, family, gpu)

    @property
    def families(self) -> list[str]:
        return sorted({c.partition(".")[0] for c in self.columns if "." in c})

    @property
    def gpus(self) -> list[str]:
        return sorted({c.partition("@")[2] for c in self.columns if "@" in c})


def gpu_key(gpu: str) -> str:
    """A GPU by its name in the bundled hardware file (aliases resolved)."""
    return gpus.names(gpus.bundled()).get(gpu.casefold(), gpu)


def columns(families: Sequence[str], devices: Sequence[str]) -> list[str]:
    return [*(f"{name}@{gpu}" for gpu in devices for name in KERNEL),
            *(f"{fam}.{name}" for fam in families for name in HOST)]


def prior_of(column: str) -> tuple[float, float]:
    name = column.partition("@")[0].rpartition(".")[2]
    return PRIORS[name]


def coefficients_of(values: Mapping[str, float], family: str, gpu: str) -> StepCoefficients:
    out = {}
    for name in NAMES:
        key = f"{name}@{gpu}" if name in KERNEL else f"{family}.{name}"
        out[name] = float(values.get(key, PRIORS[name][0]))
    return StepCoefficients(**out)


def nnls(a: np.ndarray, b: np.ndarray, iterations: int = 500) -> np.ndarray:
    """Non-negative least squares (Lawson and Hanson's active-set method; numpy only)."""
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    for _ in range(iterations):
        if passive.all() or w[~passive].max(initial=-np.inf) <= 1e-12:
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            bad = passive & (z <= 0)
            alpha = np.min(x[bad] / np.maximum(x[bad] - z[bad], 1e-300))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    return x


def fit(stages: Sequence[Stage], start: Mapping[str, float] | None = None,
        seed: int = 42, max_requests: int | None = FIT_REQUESTS, rounds: int = ROUNDS,
        progress: Callable[[int, Fitted, int], None] | None = None) -> Fitted:
    """The host coefficients of every server family and the kernel multipliers of every GPU
    among `stages`, fitted to their measurements (censored stages are never fitted: the load
    the server saw depends on when the client gave up)."""
    stages = [s for s in stages if not s.censored]
    if not stages:
        raise ScenarioError("--fit", "no uncensored stage to fit")
    families = sorted({s.server for s in stages})
    devices = sorted({gpu_key(s.gpu) for s in stages})
    cols = columns(families, devices)
    priors = np.array([prior_of(col)[0] for col in cols])
    weights = np.array([prior_of(col)[1] for col in cols])
    x = np.array([(start or {}).get(col, p) for col, p in zip(cols, priors, strict=True)]) \
        / priors
    fitted = Fitted(tuple(cols), dict(zip(cols, x * priors, strict=True)), {},
                    dict(zip(cols, weights, strict=True)), tuple(s.key for s in stages))
    for round_ in range(rounds):
        rows, rhs, names, errors = [], [], [], []
        for stage in stages:
            c = fitted.coefficients(stage.server, gpu_key(stage.gpu))
            result = stage_fit(stage, c, seed, max_requests)
            for metric, form, target in result.equations:
                if result.overloaded and metric != "duration":
                    continue
                value = form.value(as_stage_vector(c))
                if metric != "duration" and value > QUEUEING * target:
                    continue  # a queue, not a few steps: not linear in the coefficients
                row = stage_row(form, stage.server, gpu_key(stage.gpu), cols)
                rows.append(row * priors / target)
                rhs.append(1.0 - form.constant / target)
                names.append(f"{stage.key}:{metric}")
                errors.append(100.0 * (value - target) / target)
        if not rows:
            raise ScenarioError("--fit", "no fitted stage gave an equation")
        data = np.array(rows)
        solution = solve(data, np.array(rhs), cols)
        info = {col: float(np.sum(data[:, k] ** 2)) for k, col in enumerate(cols)}
        step = (solution - x) / (round_ + 1)  # a full step, then ever smaller ones
        x = x + step
        fitted = replace(fitted, values=dict(zip(cols, x * priors, strict=True)),
                         information=info, residuals=dict(zip(names, errors, strict=True)))
        if progress:
            progress(round_, fitted, len(rows))
        if float(np.max(np.abs(step))) < SETTLED:
            break
    return fitted


def solve(data: np.ndarray, rhs: np.ndarray, cols: Sequence[str]) -> np.ndarray:
    """The coefficients (in units of their priors) that best meet the data's equations, each
    coefficient's soft equation saying it is near its prior, and the ties between GPUs."""
    weights = np.array([prior_of(col)[1] for col in cols])
    ties = tie_rows(cols)
    a = np.vstack([data, np.diag(weights), ties])
    b = np.concatenate([rhs, weights, np.zeros(len(ties))])
    return nnls(a, b)


def tie_rows(cols: Sequence[str]) -> np.ndarray:
    """Soft equations holding each kernel multiplier of one GPU near the same multiplier of
    every other GPU of the fit (weight TIE): the kernels are the same server's code on every
    GPU, so how far they fall short of the microbenchmark rates is much the same on each.
    A GPU whose data exercise a term barely (the H100's uncached prefills, when the one set
    that has them is held out) then takes it from the GPUs whose data do, not from 1.0."""
    ties = []
    for name in KERNEL:
        same = [k for k, col in enumerate(cols) if col.partition("@")[0] == name]
        for i, j in itertools.combinations(same, 2):
            row = np.zeros(len(cols))
            row[i], row[j] = TIE, -TIE
            ties.append(row)
    return np.array(ties).reshape(-1, len(cols))


def as_stage_vector(c: StepCoefficients) -> np.ndarray:
    return np.array([getattr(c, n) for n in NAMES])


def stage_row(form: Form, family: str, gpu: str, cols: Sequence[str]) -> np.ndarray:
    """A form over one stage's coefficients as a row over the fit's columns."""
    row = np.zeros(len(cols))
    for k, col in enumerate(cols):
        name, _, device = col.partition("@")
        fam, _, host = name.rpartition(".")
        if device == gpu or (not device and fam == family):
            row[k] = form.vector[INDEX[host]]
    return row
