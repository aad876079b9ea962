"""The physical step model, native mode's default latency (`latency.type: physical`).

A vLLM or SGLang step is one fused forward pass over every scheduled token. Per GPU of a
tensor-parallel group, at the GPU's achievable rates (config/hardware.py), it costs

    step_us + request_us * R                              CPU: scheduling, launches, sampling
  + max(weights * W / BW, gemm * F_linear / F)            linear layers: bytes or FLOPs
  + kv_reads * KV / BW                                    every request reads its KV cache
  + attention * F_attention / F                           prefill chunks attend to context
  + allreduce * 2L * latency * log2(TP) + link * 2L * ring bytes / link bandwidth
  + graph_layer_us * L                  when R > the server's largest captured graph batch

R requests, W the weights the step touches (for a mixture of experts only the experts its
tokens route to, in expectation), KV the cache entries read by context length. Each
coefficient multiplies one quantity (config/step_models.py), so a coefficient is fitted only
from data in which its quantity matters, and stays at its physical prior (1.0: as fast as
microbenchmarks reach) where none does.

A server replays a decode step as a captured CUDA graph (compiled by torch.compile up to a
smaller batch, where the server is told to compile) only up to a batch size its settings fix
(`graph_max_batch`: vLLM's `max_cudagraph_capture_size`, SGLang's `cuda_graph_max_bs`, or its
`torch_compile_max_bs` under `--enable-torch-compile`). A step of more requests runs outside
those graphs, its per-kernel launch and unfused work costing `graph_layer_us` per layer.

Before the engine queue a request goes through the API server, a serial process per instance:
`api_request_us` + `api_input_token_us` per prompt token of its own work, behind the work
already queued there, including `api_output_token_us` per token the engine streamed out; plus
`api_fixed_us` of latency that holds nothing. That queue is what makes TTFT grow with load
before the engine saturates (docs/accuracy.md). A request arriving while the engine is busy
is taken in `intake_steps` times the running step's duration later (input is read between
steps, and a step's outputs are handled while the next one runs), which is why TTFT grows
with the step time of larger models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from mypy_extensions import mypyc_attr

from blis_simpy.config.hardware import GpuSpec
from blis_simpy.config.moe import DEFAULT_COMM, MOE_COMM, ROUTED
from blis_simpy.config.step_models import StepCoefficients
from blis_simpy.core.request import Request
from blis_simpy.engine.roofline_native import NativeShape

US = 1e6  # µs per second
# Quantities of one step, in this order (`StepShape.quantities`); each has a coefficient.
QUANTITIES = ("step_us", "request_us", "weights", "kv_reads", "gemm", "attention",
              "allreduce", "link", "graph_layer_us")
NO_GRAPH_LIMIT = 1 << 30  # every batch runs in the server's captured graphs


class Clock(Protocol):
    @property
    def now(self) -> float: ...


class StepShape:
    """What a step of one model on one tensor-parallel GPU group costs per unit, in µs at
    the GPU's achievable rates."""

    def __init__(self, shape: NativeShape, gpu: GpuSpec, tp: int, dp: int = 1,
                 expert_parallel: bool = False, comm: str = DEFAULT_COMM) -> None:
        if tp < 1:
            raise ValueError(f"tp must be a positive integer, got {tp!r}")
        if dp < 1:
            raise ValueError(f"dp must be a positive integer, got {dp!r}")
        if shape.experts == 1 and (dp > 1 or expert_parallel):
            raise ValueError("data-parallel ranks and expert parallelism inside an instance "
                             "need a mixture of experts")
        m, b = shape, float(shape.bytes_per_param)
        bw, flops, link = gpu.bytes_per_s / US, gpu.flops_per_s / US, gpu.link_bytes_per_s / US
        q_width = m.heads * m.head_dim
        attn_params = m.attention_params()
        expert_params = 3.0 * m.hidden * m.intermediate  # gated MLP: gate, up, down
        lm_head = float(m.vocab * m.hidden)
        self.experts = float(m.experts)
        self.experts_per_token = float(m.experts_per_token)
        # Read whatever the batch: attention, LM head, the MLP of a dense model; of a mixture
        # of experts the routers, shared experts and dense layers besides the routed experts.
        if m.experts > 1:
            other = m.layers * attn_params + m.other_mlp_params()
            self.fixed_us = (other + lm_head) * b / tp / bw
            self.expert_us = m.moe_layers * expert_params * b / tp / bw
            active = other + m.moe_layers * m.experts_per_token * expert_params
        else:
            self.fixed_us = (m.layers * attn_params + lm_head + m.layers * expert_params
                             ) * b / tp / bw
            self.expert_us = 0.0
            active = m.layers * (attn_params + expert_params)
        self.gemm_us_per_token = 2.0 * active / tp / flops
        self.gemm_us_per_request = 2.0 * lm_head / tp / flops  # one row of logits each
        kv_heads_per_gpu = math.ceil(m.kv_heads / tp)  # replicated when tp > kv_heads
        self.kv_us_per_token = 2.0 * m.layers * kv_heads_per_gpu * m.head_dim * b / bw
        self.attn_us_per_pair = 4.0 * q_width * m.layers / tp / flops  # QK^T and AV
        if m.latent is not None:  # the whole latent on every GPU; absorbed attention
            self.kv_us_per_token = m.layers * m.latent.cached * b / bw
            self.attn_us_per_pair = m.latent.flops_per_pair(m.heads) * m.layers / tp / flops
        ring = 2.0 * (tp - 1) / tp * m.hidden * b  # bytes per token per all-reduce
        # A small all-reduce's latency grows with the log of the GPUs it spans (recursive
        # doubling): the hardware figure is for two GPUs.
        self.allreduce_us = 2.0 * m.layers * gpu.allreduce_latency_us * math.log2(tp)
        self.link_us_per_token = 2.0 * m.layers * ring / link if tp > 1 else 0.0
        self.parallel = MoeParallel(m, gpu, tp, dp, expert_parallel, comm) \
            if dp > 1 or expert_parallel else None
        self.layers = float(m.layers)
        # The largest step (requests) the server runs in its captured graphs (the server's
        # setting, engine/latency.py); a larger one pays `graph_layer_us` per layer.
        self.graph_max_batch = NO_GRAPH_LIMIT

    def outside_graphs(self, requests: float) -> float:
        """The layers a step of `requests` requests runs outside the captured graphs."""
        return self.layers if requests > self.graph_max_batch else 0.0

    def weights_us(self, tokens: float) -> float:
        """Streaming the weights a step over `tokens` tokens touches: all experts a token
        routes to, in expectation under uniform routing (E (1 - (1 - k/E)^T) per layer)."""
        if self.expert_us == 0.0:
            return self.fixed_us
        touched = self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens)
        return self.fixed_us + touched * self.expert_us

    def quantities(self, batch: Sequence[Request], decoders: int = 0, context: int = 0
                   ) -> list[float]:
        """The step's quantities (QUANTITIES order), each the µs its coefficient multiplies;
        `weights` and `gemm` both given (the step pays the longer of the two scaled). Plus
        `decoders` requests outside `batch` decoding one token each, whose progress sums to
        `context` (the steady path's implicit decoders). Every term is a whole number (a
        prefill's pairs too: n done + n (n + 1) / 2), so the float sums are exact in any order
        and a decoder counts the same in bulk as one by one."""
        tokens = float(decoders)
        kv_tokens = pairs = float(context + decoders)
        for req in batch:
            chunk = req.chunk
            done = float(req.progress)
            if chunk == -1:  # a decode: one token over its whole context
                tokens += 1.0
                kv_tokens += done + 1.0
                pairs += done + 1.0
            elif chunk < 0:  # a speculative decode: verifies -chunk positions (1 + drafted)
                n = float(-chunk)
                tokens += n
                kv_tokens += done + n
                pairs += n * (done + (n + 1.0) / 2.0)
            else:
                n = float(chunk)
                tokens += n
                kv_tokens += done + n
                pairs += n * (done + (n + 1.0) / 2.0)
        return self.totals(tokens, kv_tokens, pairs, float(len(batch) + decoders))

    def totals(self, tokens: float, kv_tokens: float, pairs: float, requests: float
               ) -> list[float]:
        """The quantities of a step over `tokens` new tokens of `requests` requests, reading
        or writing `kv_tokens` KV entries and attending over `pairs` (token, context) pairs."""
        if self.parallel is not None:
            return self.parallel.quantities(self, tokens, kv_tokens, pairs, requests)
        return [1.0, requests, self.weights_us(tokens),
                kv_tokens * self.kv_us_per_token,
                tokens * self.gemm_us_per_token + requests * self.gemm_us_per_request,
                pairs * self.attn_us_per_pair, self.allreduce_us,
                tokens * self.link_us_per_token, self.outside_graphs(requests)]


class MoeParallel:
    """A mixture of experts served by `dp` data-parallel ranks of `tp` GPUs each, or with
    expert parallelism: how it changes a step's quantities (docs/guides/moe.md).

    The ranks share one scheduler (one batch per instance), each runs a balanced 1/dp of the
    batch: its requests, tokens, KV reads and attention, and its own copy of the attention and
    LM-head weights. The experts are spread over all G = tp x dp GPUs: sliced (each GPU holds
    1/G of every expert) or, with expert parallelism, whole (E/G experts each). Their FLOPs are
    the routed tokens' k expert passes over G GPUs either way. Their weight reads differ: a
    sliced expert costs every GPU 1/G of it when any token routes to it, so each reads 1/G of
    the touched experts; a whole expert costs only its owner, and the step waits for the GPU
    that owns the most touched experts (few tokens touch few experts, unevenly spread).

    At dp > 1 the MoE layers exchange hidden states instead of all-reducing them over TP
    (vLLM's dispatch and combine, two collectives per MoE layer), by the backend's family:
    the all-gather backends (`naive`, `allgather_reducescatter`) give every rank all other
    ranks' tokens, 2 T (dp-1)/dp hidden states per GPU and layer; the all-to-all kernels
    (`pplx`, `deepep_*`, `mori`, `flashinfer_all2allv`, which vLLM runs under expert
    parallelism only) send each of a rank's T/dp tokens to its k experts' GPUs,
    2 (T/dp) k (G-1)/G. Attention still all-reduces over the rank's TP group."""

    def __init__(self, m: NativeShape, gpu: GpuSpec, tp: int, dp: int, expert_parallel: bool,
                 comm: str) -> None:
        if comm not in MOE_COMM:
            raise ValueError(f"unknown MoE comm backend {comm!r}; valid: {', '.join(MOE_COMM)}")
        b, link = float(m.bytes_per_param), gpu.link_bytes_per_s / US
        self.ranks = float(dp)
        group = tp * dp
        self.group = float(group)
        self.experts = float(m.experts)
        self.per_gpu = math.ceil(m.experts / group)  # whole experts the busiest GPU owns
        self.expert_parallel = expert_parallel
        self.routed = expert_parallel and comm in ROUTED  # all-to-all kernels need EP
        self.k = float(m.experts_per_token)
        moe = m.moe_layers
        reduced = m.layers + (m.layers - moe)  # all-reduces over TP: attention, dense MLPs
        # One whole expert in every MoE layer, read on one GPU (µs).
        self.expert_us = moe * 3.0 * m.hidden * m.intermediate * b / (gpu.bytes_per_s / US)
        ring = 2.0 * (tp - 1) / tp * m.hidden * b
        lat = gpu.allreduce_latency_us
        self.rank_link_us_per_token = reduced * ring / link if tp > 1 else 0.0
        if dp > 1:  # dispatch and combine span the G GPUs
            self.collective_us = lat * (reduced * math.log2(tp) + 2.0 * moe * math.log2(group))
            self.moe_link_us_per_token = 2.0 * moe * m.hidden * b / link * (
                self.k * (group - 1) / group / dp if self.routed else (dp - 1) / dp)
        else:  # one rank: the MoE output all-reduces over TP like a dense MLP's
            self.collective_us = (reduced + moe) * lat * math.log2(tp)
            self.moe_link_us_per_token = moe * ring / link if tp > 1 else 0.0

    def touched(self, tokens: float) -> float:
        """Expected distinct experts per layer that `tokens` tokens route to."""
        return self.experts * (1.0 - (1.0 - self.k / self.experts) ** tokens)

    def busiest(self, tokens: float) -> float:
        """Expected touched experts on the GPU owning the most of them: each of a GPU's E/G
        experts is touched with p = 1 - (1 - k/E)^T, independently, so a GPU's count is
        Binomial(E/G, p) and E[max of G] = sum_j (1 - F(j)^G)."""
        n = self.per_gpu
        p = 1.0 - (1.0 - self.k / self.experts) ** tokens
        term = (1.0 - p) ** n  # P(count = 0)
        cdf, expected = 0.0, 0.0
        for j in range(n):
            cdf += term
            expected += 1.0 - min(cdf, 1.0) ** self.group
            term *= (n - j) / (j + 1.0) * p / (1.0 - p) if p < 1.0 else 0.0
        return expected

    def quantities(self, shape: StepShape, tokens: float, kv_tokens: float, pairs: float,
                   requests: float) -> list[float]:
        d = self.ranks
        experts = (self.busiest(tokens) if self.expert_parallel
                   else self.touched(tokens) / self.group) if tokens > 0.0 else 0.0
        return [1.0, requests / d, shape.fixed_us + experts * self.expert_us,
                kv_tokens * shape.kv_us_per_token / d,
                (tokens * shape.gemm_us_per_token + requests * shape.gemm_us_per_request) / d,
                pairs * shape.attn_us_per_pair / d, self.collective_us,
                tokens * (self.rank_link_us_per_token / d + self.moe_link_us_per_token),
                shape.outside_graphs(requests / d)]


# The step coefficients in QUANTITIES order, as plain floats (`step_terms`).
Terms = tuple[float, float, float, float, float, float, float, float, float]


def step_terms(c: StepCoefficients) -> Terms:
    """The coefficients a step's duration multiplies its quantities by, read from the
    (interpreted) dataclass once rather than attribute by attribute at every step."""
    return (c.step_us, c.request_us, c.weights, c.kv_reads, c.gemm, c.attention, c.allreduce,
            c.link, c.graph_layer_us)


def step_us(q: list[float], c: StepCoefficients) -> float:
    """A step's duration (µs) from its quantities."""
    return terms_us(q, step_terms(c))


def terms_us(q: list[float], k: Terms) -> float:
    """`step_us` with the coefficients as `step_terms` gives them."""
    return (k[0] * q[0] + k[1] * q[1] + max(k[2] * q[2], k[4] * q[4]) + k[3] * q[3]
            + k[5] * q[5] + k[6] * q[6] + k[7] * q[7] + k[8] * q[8])


def emitted(batch: Sequence[Request]) -> int:
    """Requests that produce a token at this step's end (decodes and completed prefills)."""
    count = 0
    for req in batch:
        if req.chunk < 0 or req.progress + req.chunk >= req.prefill_target:
            count += 1
    return count


@mypyc_attr(allow_interpreted_subclasses=True)  # calibrate/fit.py records what it serves
class ApiServer:
    """The API server in front of one instance: a FIFO server of requests and streamed
    tokens (Lindley's recursion; the tokens of a step join at the step's end)."""

    def __init__(self, c: StepCoefficients) -> None:
        self.c = c
        self.free_at = 0.0  # when the work queued so far is done (µs)
        self.pending_at = -1.0  # a step's streamed tokens, joining at that step's end
        self.pending_tokens = 0

    def settle(self, now: float) -> None:
        """Queue the pending tokens if their step has ended by `now`."""
        if 0.0 <= self.pending_at <= now:
            self.free_at = max(self.free_at, self.pending_at) \
                + self.c.api_output_token_us * self.pending_tokens
            self.pending_at = -1.0

    def arrive(self, now: float, input_len: int) -> float:
        """A request arrives at `now`: µs until it reaches the engine queue."""
        self.settle(now)
        c = self.c
        self.free_at = max(now, self.free_at) + c.api_request_us \
            + c.api_input_token_us * input_len
        return self.free_at - now + c.api_fixed_us

    def stream(self, now: float, ends_at: float, tokens: int) -> None:
        """A step running from `now` to `ends_at` streams `tokens` tokens out at its end."""
        self.settle(now)
        self.pending_at, self.pending_tokens = ends_at, tokens


@mypyc_attr(allow_interpreted_subclasses=True)  # calibrate/fit.py records the quantities
class PhysicalLatency:
    """The LatencyModel of `latency.type: physical`. `bind` gives each instance its own API
    server on the simulation's clock; unbound (a model on its own), a request's delay is its
    own API work with no queue."""

    per_request = True
    bulk = True  # the batch is read through sums only (latency.BulkLatency)

    def __init__(self, shape: StepShape, coefficients: StepCoefficients,
                 clock: Clock | None = None) -> None:
        self.shape = shape
        self.c = coefficients
        self.terms = step_terms(coefficients)
        self.output_delay = 0
        self.clock = clock
        self.api = ApiServer(coefficients)
        self.notes: list[str] = []  # config fields the model does not apply (run warnings)
        self.step_ends = -1.0  # when the step under way ends (µs)
        self.step_duration = 0.0
        self.mixes_prefill = True  # the server family's step formation (engine/step.py)

    def bind(self, clock: Clock) -> PhysicalLatency:
        model = type(self)(self.shape, self.c, clock)
        model.notes = self.notes
        model.mixes_prefill = self.mixes_prefill
        return model

    def queue_delay(self, input_len: int) -> int:
        now = float(self.clock.now) if self.clock is not None else 0.0
        delay = self.api.arrive(now, input_len)
        if now < self.step_ends:  # the engine is busy: it takes requests in behind its steps
            delay += self.c.intake_steps * self.step_duration
        return int(delay)

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        return self.bulk_step_time(batch, 0, 0, extra_us)

    def bulk_step_time(self, batch: Sequence[Request], decoders: int, context: int,
                       extra_us: int) -> int:
        duration = int(terms_us(self.shape.quantities(batch, decoders, context), self.terms)) \
            + extra_us
        if self.clock is not None:
            now = float(self.clock.now)
            self.api.stream(now, now + duration, emitted(batch) + decoders)
            self.step_ends, self.step_duration = now + duration, float(duration)
        return duration
