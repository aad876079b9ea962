"""A calibrated, physically shaped step-time model (`latency: {type: physical, beta: [...]}`).

A step's time is a non-negative combination of what the step physically does, each term
already divided by the hardware's peak so that its coefficient is dimensionless (1 / the
efficiency reached) or a plain overhead in µs:

  t = b0 * 1                      fixed per-step overhead (µs)
    + b1 * weight bytes / BW      weights read once per fused step; for a mixture of experts
                                  only the experts the step's tokens touch (expected count)
    + b2 * FLOPs / peak           2 x active parameters x tokens, plus prefill attention
    + b3 * KV bytes / BW          KV cache read by every request's attention, by context length
    + b4 * requests               per-request overhead (µs): sampling, scheduling, bookkeeping
    + b5 * all-reduces            2 per layer when tensor-parallel (µs each)

BW and peak are the GPU's (hardware_config.json) times the tensor-parallel degree. The
coefficients are fitted by `blis-simpy calibrate` from measurements; nothing here is tuned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from blis_simpy.config.catalog import bundled_hardware_config, bundled_model_config, read_json
from blis_simpy.config.scenario import PHYSICAL_TERMS, Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.engine.alpha import Alpha, batch_shape
from blis_simpy.engine.roofline_native import NativeShape

TERMS = ("overhead_us", "weights", "compute", "kv_reads", "per_request_us", "allreduce_us")
assert len(TERMS) == PHYSICAL_TERMS
UNQUANTIZED = ("float16", "bfloat16", "float32")


@dataclass(frozen=True, slots=True)
class Physics:
    """Per-step physical quantities of one model on one GPU group (bytes, FLOPs, µs)."""
    layers: int
    hidden: int
    dense_params: float  # read every step: attention, router, LM head
    expert_params: float  # one expert's MLP over all layers (0 for a dense model)
    experts: int
    experts_per_token: int
    bytes_per_param: int
    kv_bytes_per_token: float
    bytes_per_us: float  # HBM bandwidth of the TP group
    flops_per_us: float  # peak dense FLOP rate of the TP group
    tp: int

    @classmethod
    def of(cls, config: dict[str, Any], tflops: float, bw_tbs: float, tp: int) -> Physics:
        """From a HuggingFace config, read as the native roofline reads it (NativeShape);
        only unquantized weights, whose bytes per parameter the coefficients assume."""
        m = NativeShape.from_hf_config(config)
        text = config.get("text_config")
        dtype = (text if isinstance(text, dict) and "torch_dtype" in text else config).get(
            "torch_dtype")
        if dtype not in UNQUANTIZED:
            raise ValueError(f"model config key 'torch_dtype' is {dtype!r}; expected one of "
                             f"{', '.join(UNQUANTIZED)}")
        experts = m.experts if m.experts > 1 else 0
        attention = m.layers * (2 * m.hidden * m.heads * m.head_dim
                                + 2 * m.hidden * m.kv_heads * m.head_dim)
        mlp = m.layers * 3 * m.hidden * m.intermediate
        router = m.layers * m.hidden * experts
        return cls(layers=m.layers, hidden=m.hidden,
                   dense_params=attention + router + m.vocab * m.hidden + (0 if experts else mlp),
                   expert_params=mlp if experts else 0.0, experts=experts,
                   experts_per_token=m.experts_per_token if experts else 0,
                   bytes_per_param=m.bytes_per_param,
                   kv_bytes_per_token=2 * m.layers * m.kv_heads * m.head_dim * m.bytes_per_param,
                   bytes_per_us=bw_tbs * 1e6 * tp, flops_per_us=tflops * 1e6 * tp, tp=tp)

    def features(self, prefills: Sequence[tuple[int, int]], contexts: Sequence[int]
                 ) -> tuple[float, ...]:
        """The six terms of a step with prefill chunks (cached progress, chunk) and decodes
        at the given context lengths."""
        tokens = sum(chunk for _, chunk in prefills) + len(contexts)
        if self.experts:
            touched = self.experts * (1 - (1 - self.experts_per_token / self.experts) ** tokens)
            weight_params = self.dense_params + self.expert_params * touched
            active = self.dense_params + self.expert_params * self.experts_per_token
        else:
            weight_params = active = self.dense_params
        attention_flops = sum(4.0 * self.layers * self.hidden * chunk * (done + chunk / 2)
                              for done, chunk in prefills)
        kv_tokens = sum(contexts) + sum(done + chunk for done, chunk in prefills)
        return (1.0,
                weight_params * self.bytes_per_param / self.bytes_per_us,
                (2.0 * active * tokens + attention_flops) / self.flops_per_us,
                kv_tokens * self.kv_bytes_per_token / self.bytes_per_us,
                float(len(prefills) + len(contexts)),
                2.0 * self.layers if self.tp > 1 else 0.0)


class PhysicalLatency(Alpha):
    """Step time = beta . features (see the module docstring), in µs."""

    per_request = True

    def __init__(self, alpha: Sequence[float], beta: Sequence[float], physics: Physics) -> None:
        super().__init__(alpha)
        if len(beta) != len(TERMS):
            raise ValueError(f"the physical model needs {len(TERMS)} beta coefficients "
                             f"({', '.join(TERMS)}), got {len(beta)}")
        self.beta = tuple(float(b) for b in beta)
        self.physics = physics

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        features = self.physics.features(*batch_shape(batch))
        return int(sum(b * x for b, x in zip(self.beta, features, strict=True))) + extra_us


def physics(scenario: Scenario) -> Physics:
    """The physical quantities of a scenario's model on its GPUs."""
    latency, model = scenario.latency, scenario.model
    try:
        config = (read_json(latency.model_config, "config.json") if latency.model_config
                  else bundled_model_config(model.name))
    except ValueError as exc:
        raise ScenarioError("latency.model_config", str(exc)) from None
    try:
        hardware = (read_json(latency.hardware_config, None) if latency.hardware_config
                    else bundled_hardware_config())
        entry = hardware.get(model.gpu or "")
        if not isinstance(entry, dict):
            raise ValueError(f"unknown GPU {model.gpu!r}; known: {', '.join(sorted(hardware))}")
        tflops, bw = float(entry["TFlopsPeak"]), float(entry["BwPeakTBs"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ScenarioError("latency.hardware_config", str(exc)) from None
    try:
        return Physics.of(config, tflops, bw, model.tp or 1)
    except ValueError as exc:
        raise ScenarioError("latency.model_config", str(exc)) from None


def physical_latency(scenario: Scenario, alpha: Sequence[float]) -> PhysicalLatency:
    assert scenario.latency.beta is not None  # LatencyConfig.validate
    return PhysicalLatency(alpha, scenario.latency.beta, physics(scenario))
