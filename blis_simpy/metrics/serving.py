"""vLLM's serving-benchmark metrics, side by side, named and defined as its benchmark
(`benchmark_serving.py`, `vllm bench serve`) reports them with `--percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,99` (docs/metrics.md):

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

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blis_simpy.core.records import InstanceRecord, RequestColumns
from blis_simpy.core.units import US_PER_MS
from blis_simpy.metrics.gaps import TokenGaps
from blis_simpy.metrics.summary import Samples

METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (50, 90, 99)


def stats(name: str, samples: Samples) -> dict[str, float | None]:
    """mean, median, std and p50/p90/p99 in ms under vLLM's names; null without samples."""
    keys = [f"{s}_{name}_ms" for s in ("mean", "median", "std")] + \
        [f"p{p}_{name}_ms" for p in PERCENTILES]
    if not samples.count:
        return dict.fromkeys(keys, None)
    mean = samples.mean_ms()
    values = samples.sorted / US_PER_MS
    weights = np.ones(len(values)) if samples.cumulative is None else \
        np.diff(samples.cumulative, prepend=0)
    std = math.sqrt(float((weights * (values - mean) ** 2).sum()) / samples.count)
    median = samples.percentile_ms(50)
    return dict(zip(keys, [mean, median, std, *(samples.percentile_ms(p)
                                               for p in PERCENTILES)], strict=True))


def serving_benchmark(req: RequestColumns, finished: np.ndarray, gaps: TokenGaps,
                      instances: Sequence[InstanceRecord], seconds: float) -> dict[str, Any]:
    """The block for the requests selected by `finished` (completed, measured; `gaps` are
    their token gaps), over a measurement of `seconds`."""
    first, done, arrival = req.first_token_at[finished], req.completed_at[finished], \
        req.arrival[finished]
    out_len = req.output_len[finished]
    many = out_len > 1
    tpot = (done[many] - first[many]) / (out_len[many] - 1)
    itl = gaps.samples(instances)
    completed = int(finished.sum())
    out: dict[str, Any] = {
        "completed": completed,
        "duration": seconds,
        "request_throughput": completed / seconds if seconds > 0 else 0.0,
        "output_throughput": float(req.emitted[finished].sum()) / seconds if seconds > 0
        else 0.0,
        "total_token_throughput": float((req.emitted[finished] + req.input_len[finished])
                                        .sum()) / seconds if seconds > 0 else 0.0,
    }
    out.update(stats("ttft", Samples(first - arrival)))
    out.update(stats("tpot", FloatSamples(tpot)))
    out.update(stats("itl", itl))
    out.update(stats("e2el", Samples(done - arrival)))
    out["itl_breakdown"] = breakdown(gaps.weights, gaps.spans, instances)
    return out


class FloatSamples(Samples):
    """Samples of float µs values (TPOT is a quotient), kept exact."""

    def __init__(self, values: np.ndarray) -> None:
        self.sorted = np.sort(np.asarray(values, dtype=float))
        self.cumulative = None
        self.count = len(values)
        self.total = float(self.sorted.sum())

    def at(self, k: int) -> float:  # type: ignore[override]
        return float(self.sorted[k])


def breakdown(weights: list[np.ndarray], spans: np.ndarray,
              instances: Sequence[InstanceRecord]) -> dict[str, float | None]:
    """Where ITL's tail comes from: the share of gaps that ended in a step which also
    prefilled (another request's prompt chunk, or a recomputation), and the p99 of the gaps
    in steps that only decoded."""
    mixed = [i.new_tokens > 0 for i in instances]
    total = sum(int(w.sum()) for w in weights) + len(spans)
    in_mixed = sum(int(w[m].sum()) for w, m in zip(weights, mixed, strict=True))
    decode_only = Samples(np.concatenate([i.duration[~m] for i, m in
                                          zip(instances, mixed, strict=True)]
                                         or [np.zeros(0, np.int64)]),
                          np.concatenate([w[~m] for w, m in zip(weights, mixed, strict=True)]
                                         or [np.zeros(0, np.int64)]))
    return {"gaps_in_prefill_steps_share": in_mixed / total if total else None,
            "gaps_after_stalls_share": len(spans) / total if total else None,
            "p99_itl_decode_only_ms": decode_only.percentile_ms(99) if decode_only.count
            else None}
