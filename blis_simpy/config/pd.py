"""Prefill/decode disaggregation of one deployment config (seed 000 D.4, 001 §2, §6): a prefill
pool computes prompts and first tokens, a decode pool generates the rest, and the KV blocks of
each disaggregated request move between them over a transfer link.

Each pool is its own replica pool (scaled by the autoscaler independently) and may give its
own GPU, TP, latency and engine sections; what it leaves out comes from the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from blis_simpy.config.replicas import ReplicaPool
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_FLOAT, MAX_INT, MAX_SIM_S


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One role's replicas and, where they differ from the config's, hardware and step-time
    model."""

    replicas: ReplicaPool = spec(factory=ReplicaPool, help="min/max/initial replicas")
    gpu: str | None = spec(None, help="GPU type; default: the config's")
    tp: int | None = spec(None, help="tensor parallelism; default: the config's", ge=1)
    latency: dict[str, Any] | None = spec(None, help="step-time model (like `latency:`); "
                                          "default: the config's")
    engine: dict[str, Any] | None = spec(None, help="engine limits (like `engine:`); default: "
                                         "the config's")


@dataclass(frozen=True, slots=True)
class Decider:
    """Which requests are disaggregated. never: all run whole on a decode instance; always:
    all are prefilled on the prefill pool; prefix-threshold: those whose prompt, less what the
    decode pool already caches of it, is longer than `threshold` tokens."""

    type: Literal["always", "never", "prefix-threshold"] = spec(
        "always", help="always | never | prefix-threshold")
    threshold: int = spec(512, help="prefix-threshold: disaggregate when the uncached prompt "
                          "is longer than this (tokens)", ge=0, le=MAX_INT)


@dataclass(frozen=True, slots=True)
class TransferLink:
    """The prefill -> decode KV link: a transfer takes `base_latency_ms` plus its bytes over
    `bandwidth_gb_s`; transfers sharing a link queue, first come first served."""

    bandwidth_gb_s: float = spec(25.0, help="link bandwidth (GB/s, 1e9 bytes)", gt=0,
                                 le=MAX_FLOAT)
    base_latency_ms: float = spec(0.05, help="fixed cost per transfer (ms)", ge=0,
                                  le=MAX_SIM_S * 1000)
    shared: bool = spec(False, help="false: one link per prefill instance (its NIC); true: "
                        "one link for the whole deployment config")
    granularity: Literal["request", "chunk", "block"] = spec(
        "request", help="the units a transfer is sent in, each paying base_latency_ms: "
        "request (the prompt's KV as one transfer), chunk (chunk_blocks blocks each) or block "
        "(one KV block each)", omit_default=True)
    chunk_blocks: int = spec(16, help="granularity chunk: KV blocks per chunk", ge=1,
                             le=MAX_INT, omit_default=True)
    pipeline: bool = spec(
        False, help="layer-wise transfer (seed 001 §6 PipelineMode): each layer's KV is sent "
        "as soon as the prefill step has computed it, so the transfer overlaps the prefill "
        "instead of starting after it (the decode room is reserved, and the link taken, at "
        "the step's start)", omit_default=True)

    def validate(self, path: str) -> None:
        if self.granularity != "chunk" and self.chunk_blocks != 16:
            raise ScenarioError(join(path, "chunk_blocks"), f"is only read by granularity "
                                f"chunk, not {self.granularity!r}",
                                "leave it out, or granularity: chunk")


@dataclass(frozen=True, slots=True)
class Disaggregation:
    """The `disaggregated_pd` architecture of a deployment config."""

    prefill: PoolSpec = spec(help="the prefill pool")
    decode: PoolSpec = spec(help="the decode pool")
    decider: Decider = spec(factory=Decider, help="which requests are disaggregated")
    decode_choice: Literal["routing", "handoff"] = spec(
        "handoff", help="when the decode instance is chosen: routing (with the prefill one) or "
        "handoff (when the prefill is done, among the decode instances routable then)")
    link: TransferLink = spec(factory=TransferLink, help="the KV transfer link")
    max_held: int = spec(
        4, help="backpressure bound: a prefill instance holding this many finished prefills "
        "whose KV has not moved to a decode instance admits no new request", ge=1, le=MAX_INT)
    handoff_timeout_s: float = spec(
        30.0, help="a finished prefill still waiting for decode KV room this long is dropped "
        "(outcome pd_handoff_timeout); bounds every wait", gt=0, le=MAX_SIM_S)

    def validate(self, path: str) -> None:
        if self.decider.type != "prefix-threshold" and self.decider.threshold != 512:
            raise ScenarioError(join(join(path, "decider"), "threshold"),
                                f"is only read by prefix-threshold, not {self.decider.type!r}",
                                "leave it out, or type: prefix-threshold")
