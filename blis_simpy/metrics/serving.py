"""vLLM's serving-benchmark metrics, side by side, named and defined as its benchmark
(`benchmark_serving.py`, `vllm bench serve`) reports them with `--percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,99` (docs/reference/metrics.md):

* TTFT: first token - arrival, per completed request;
* TPOT (time per output token, excluding the first): (E2E - TTFT) / (output tokens - 1), per
  completed request with more than one output token: one value per request;
* ITL (inter-token latency): every gap between two consecutive tokens of a request, across all
  completed requests: one value per token after the first;
* E2EL: last token - arrival, per completed request.

TPOT averages a request's gaps, so the occasional long gap is diluted among the request's
other tokens; ITL keeps each gap, so its tail is the tokens whose step also carried another
request's prefill chunk (or a preemption's recomputation). `itl_breakdown` says how many gaps
that is and what the tail is without them. These are always the native (client-side)
definitions, whatever the run's reporting mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from blis_simpy.core.records import InstanceRecord, RequestColumns
from blis_simpy.core.units import US_PER_MS
from blis_simpy.metrics.gaps import TokenGaps
from blis_simpy.metrics.moments import float_sum, square_sum, std_ms
from blis_simpy.metrics.summary import Samples

METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (50, 90, 99)


class FloatSamples(Samples):
    """Samples of float µs values (TPOT is a quotient), kept exact: their sum is the exact
    rational (metrics/moments.py), rounded once for the mean."""

    total: Fraction  # type: ignore[assignment]

    def __init__(self, values: np.ndarray) -> None:
        self.sorted = np.sort(np.asarray(values, dtype=float))
        self.cumulative = None
        self.count = len(values)
        self.total = float_sum(self.sorted)

    def at(self, k: int) -> float:  # type: ignore[override]
        return float(self.sorted[k])

    def mean_ms(self) -> float:
        return float(self.total / self.count) / US_PER_MS if self.count else 0.0


class FloatSelected(FloatSamples):
    """Float samples known by their count, exact sum and the order statistics asked for (a
    streaming run's: metrics/order_stats.py)."""

    def __init__(self, count: int, total: Fraction, values: dict[int, float]) -> None:
        self.count, self.total, self.values = count, total, values

    def at(self, k: int) -> float:  # type: ignore[override]
        return self.values[k]


@dataclass(frozen=True, slots=True)
class ServingFigures:
    """What the block is made of: the completed (measured) requests' counts and token sums,
    each metric's samples with the exact sum of their squares, and ITL's breakdown."""

    completed: int
    output_tokens: int
    input_tokens: int
    ttft: Samples
    tpot: FloatSamples
    itl: Samples
    e2el: Samples
    squares: dict[str, int | Fraction]  # per metric: the sum of its squared µs values
    breakdown: dict[str, float | None]


def serving_figures(req: RequestColumns, finished: np.ndarray, gaps: TokenGaps,
                    instances: Sequence[InstanceRecord],
                    itl: Samples | None = None) -> ServingFigures:
    """The figures of the requests selected by `finished` (completed, measured; `gaps` are
    their token gaps), from a run's records in memory. `itl`: their gaps as samples
    already (`gaps.samples(instances)`: the summary's own, natively), not sorted again."""
    first, done, arrival = req.first_token_at[finished], req.completed_at[finished], \
        req.arrival[finished]
    out_len = req.output_len[finished]
    many = out_len > 1
    ttft, e2el = first - arrival, done - arrival
    tpot = (done[many] - first[many]) / (out_len[many] - 1)
    if itl is None:
        itl = gaps.samples(instances)
    mixed = [i.new_tokens > 0 for i in instances]
    durations, weights = gaps.ordered([i.duration for i in instances]), \
        gaps.ordered(gaps.weights)
    decode_only = Samples(np.concatenate([d[~m] for d, m in
                                          zip(durations, gaps.ordered(mixed), strict=True)]
                                         or [np.zeros(0, np.int64)]),
                          np.concatenate([w[~m] for w, m in
                                          zip(weights, gaps.ordered(mixed), strict=True)]
                                         or [np.zeros(0, np.int64)]))
    return ServingFigures(
        completed=int(finished.sum()), output_tokens=int(req.emitted[finished].sum()),
        input_tokens=int(req.input_len[finished].sum()), ttft=Samples(ttft),
        tpot=FloatSamples(tpot), itl=itl, e2el=Samples(e2el),
        squares={"ttft": square_sum(ttft), "tpot": float_sum(tpot * tpot),
                 "itl": squares(itl), "e2el": square_sum(e2el)},
        breakdown=breakdown(sum(int(w[m].sum()) for w, m in zip(gaps.weights, mixed,
                                                                 strict=True)),
                            sum(int(w.sum()) for w in gaps.weights), len(gaps.spans),
                            decode_only))


def squares(samples: Samples) -> int:
    """The exact sum of the squared values of integer samples, weights included."""
    if samples.cumulative is None:
        return square_sum(samples.sorted)
    return square_sum(samples.sorted, np.diff(samples.cumulative, prepend=0))


def stats(name: str, samples: Samples, squared: int | Fraction) -> dict[str, float | None]:
    """mean, median, std and p50/p90/p99 in ms under vLLM's names; null without samples."""
    keys = [f"{s}_{name}_ms" for s in ("mean", "median", "std")] + \
        [f"p{p}_{name}_ms" for p in PERCENTILES]
    if not samples.count:
        return dict.fromkeys(keys, None)
    std = std_ms(samples.count, samples.total, squared)
    return dict(zip(keys, [samples.mean_ms(), samples.percentile_ms(50), std,
                           *(samples.percentile_ms(p) for p in PERCENTILES)], strict=True))


def serving_benchmark(fig: ServingFigures, seconds: float) -> dict[str, Any]:
    """The block, over a measurement of `seconds`."""
    out: dict[str, Any] = {
        "completed": fig.completed,
        "duration": seconds,
        "request_throughput": fig.completed / seconds if seconds > 0 else 0.0,
        "output_throughput": float(fig.output_tokens) / seconds if seconds > 0 else 0.0,
        "total_token_throughput": float(fig.output_tokens + fig.input_tokens) / seconds
        if seconds > 0 else 0.0,
    }
    for name in METRICS:
        out.update(stats(name, getattr(fig, name), fig.squares[name]))
    out["itl_breakdown"] = fig.breakdown
    return out


def breakdown(in_prefill_steps: int, in_steps: int, spans: int, decode_only: Samples
              ) -> dict[str, float | None]:
    """Where ITL's tail comes from: the share of gaps that ended in a step which also
    prefilled (another request's prompt chunk, or a recomputation), and the p99 of the gaps
    in steps that only decoded; `in_steps` gaps ended in one step after the token before,
    `spans` spanned several."""
    total = in_steps + spans
    return {"gaps_in_prefill_steps_share": in_prefill_steps / total if total else None,
            "gaps_after_stalls_share": spans / total if total else None,
            "p99_itl_decode_only_ms": decode_only.percentile_ms(99) if decode_only.count
            else None}
