"""Speculative decoding in the engine (`engine.speculative`): how many drafted tokens a verify
step accepts, and what a draft model costs.

The stepper (engine/step.py) schedules a decoding request's `1 + d` verified positions and
asks `Speculation.accept` how many of the `d` drafted tokens the target model accepts: the
accepted prefix of a draft, min(d, G - 1) with G geometric (success 1 - a), so
P(at least i accepted) = a^i, with `a` the request's tenant's rate (tenants whose text is more
predictable accept more). The draws come from the instance's own stream.

With `method: draft_model` a small model drafts on the same GPUs, `d` forward passes per step
of one token per drafting request (the i-th at context + i - 1), the first pass also over the
step's prefill chunks (the draft keeps its own KV of every prompt). `DraftModel.cost_us` costs
those passes with the scenario's step model built for the draft's config.json, its GPU terms
only: the step's CPU work (scheduling, sampling set-up) is done once per engine step and is
already in the target's step time. `Drafted` adds that cost to every step of an instance,
as time on top of the target's verification pass. The draft's weights and KV take GPU memory
from the KV cache (config/resolve.py, `draft_kv_blocks`): the draft's KV of a token lives in
the same block as the target's, as vLLM allocates it, so a request's blocks count both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.speculation import SpeculativeConfig, draft_model_config
from blis_simpy.config.step_models import StepCoefficients
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request
from blis_simpy.engine.latency import LatencyModel, PhysicalLatency, native_inputs, splits
from blis_simpy.engine.physical import StepShape, step_us
from blis_simpy.engine.roofline_native import NativeRoofline, NativeShape

MODEL_KEY = "engine.speculative.model"
# A pass: (tokens already in the draft's KV cache, new tokens) per request in it.
Pass = list[tuple[int, int]]


class Speculation:
    """One instance's acceptance draws and counts: tokens drafted, accepted and verify steps,
    in total and by tenant."""

    def __init__(self, config: SpeculativeConfig, rng: Any) -> None:
        self.rate = config.acceptance_rate
        self.rates = config.tenant_acceptance
        self.rng = rng
        self.drafted = 0
        self.accepted = 0
        self.steps = 0
        self.tenants: dict[str, list[int]] = {}

    def accept(self, req: Request, drafted: int) -> int:
        """Tokens of the `drafted` the target accepts at this verify step."""
        accepted = 0
        if drafted:
            a = self.rate
            if self.rates:
                a = self.rates.get(req.tenant_id, a)
            accepted = drafted if a >= 1.0 else min(drafted,
                                                    int(self.rng.geometric(1.0 - a)) - 1)
        self.drafted += drafted
        self.accepted += accepted
        self.steps += 1
        counts = self.tenants.get(req.tenant_id)
        if counts is None:
            counts = self.tenants[req.tenant_id] = [0, 0, 0]
        counts[0] += drafted
        counts[1] += accepted
        counts[2] += 1
        return accepted

    def flush(self, recorder: Recorder) -> None:
        """Add this instance's counts to the run's (at its end)."""
        totals = recorder.speculation
        totals[0] += self.drafted
        totals[1] += self.accepted
        totals[2] += self.steps
        for name, counts in self.tenants.items():
            total = recorder.speculation_tenants.setdefault(name, [0, 0, 0])
            for i, n in enumerate(counts):
                total[i] += n


def draft_passes(batch: Sequence[Request]) -> list[Pass]:
    """The draft model's forward passes in a step over `batch` (chunks set by the stepper: a
    prefill chunk >= 0, a speculative decode -1 - d with d drafted): the first over every
    prefill chunk and one token per drafting request, the i-th over one token per request
    drafting at least i, at its context + i - 1."""
    first: Pass = []
    drafting: list[tuple[int, int]] = []
    for req in batch:
        chunk = req.chunk
        if chunk >= 0:
            first.append((req.progress, chunk))
        elif chunk < -1:
            first.append((req.progress, 1))
            drafting.append((req.progress, -1 - chunk))
    passes = [first] if first else []
    longest = max((d for _, d in drafting), default=0)
    for i in range(1, longest):
        passes.append([(done + i, 1) for done, d in drafting if d > i])
    return passes


class DraftModel:
    """The GPU time of a step's draft passes, from a function of one pass."""

    def __init__(self, pass_us: Callable[[Pass], float]) -> None:
        self.pass_us = pass_us

    def cost_us(self, batch: Sequence[Request]) -> int:
        return int(sum(self.pass_us(p) for p in draft_passes(batch)))


def physical_pass(shape: StepShape, c: StepCoefficients) -> Callable[[Pass], float]:
    """A pass by the physical step model's GPU terms (no per-step or per-request CPU term)."""
    def pass_us(requests: Pass) -> float:
        tokens = kv_tokens = pairs = 0.0
        for done, n in requests:
            tokens += n
            kv_tokens += done + n
            pairs += n * (done + (n + 1.0) / 2.0)
        q = shape.totals(tokens, kv_tokens, pairs, float(len(requests)))
        q[0] = q[1] = 0.0
        return step_us(q, c)
    return pass_us


def roofline_pass(model: NativeRoofline) -> Callable[[Pass], float]:
    """A pass by the native roofline, without its per-step overhead."""
    def pass_us(requests: Pass) -> float:
        tokens = kv_tokens = 0
        attended = 0.0
        for done, n in requests:
            tokens += n
            attended += n * (done + (n + 1) / 2)
            kv_tokens += done + n
        cost = model.cost(tokens, len(requests), attended, kv_tokens)
        return (cost.linear_s + cost.attention_s + cost.comm_s) * 1e6
    return pass_us


def draft_model(scenario: Scenario, target: LatencyModel) -> DraftModel | None:
    """The draft model's cost on the scenario's GPUs (the target's tensor parallelism, vLLM's
    default), by the scenario's step model (physical or native roofline: the scenario refuses
    a blackbox one); None for n-gram speculation."""
    config = scenario.engine.speculative
    if config is None or config.method != "draft_model":
        return None
    _, _, gpu, tp = native_inputs(scenario)
    try:
        shape = NativeShape.from_hf_config(draft_model_config(config))
    except ValueError as exc:
        raise ScenarioError(MODEL_KEY, f"draft model config: {exc}") from None
    if not splits(shape.heads, shape.kv_heads, tp):
        raise ScenarioError(MODEL_KEY, f"the draft model's {shape.heads} attention heads "
                            f"({shape.kv_heads} KV heads) do not split over the target's "
                            f"{tp} GPUs (vLLM runs the draft at the target's tensor "
                            "parallelism)", "a draft model whose heads split over model.tp")
    if isinstance(target, PhysicalLatency):
        return DraftModel(physical_pass(StepShape(shape, gpu, tp), target.c))
    return DraftModel(roofline_pass(NativeRoofline(shape, gpu, tp)))


class Drafted:
    """An instance's step times with its draft model's passes added to each step's."""

    def __init__(self, base: LatencyModel, draft: DraftModel) -> None:
        self.base = base
        self.draft = draft
        self.output_delay = base.output_delay
        self.per_request = True

    def queue_delay(self, input_len: int) -> int:
        return self.base.queue_delay(input_len)

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        return self.base.step_time(new_tokens, decodes, batch,
                                   extra_us + self.draft.cost_us(batch))


def speculate(instance: Any, config: SpeculativeConfig,
              draft: DraftModel | None, rng: Any) -> None:
    """Turn speculation on in a new instance (a Stepper): its acceptance draws from `rng`, and
    with a draft model, the draft's passes in each step's time."""
    instance.speculate(config.draft_tokens, Speculation(config, rng))
    if draft is not None:
        instance.latency = Drafted(instance.latency, draft)
