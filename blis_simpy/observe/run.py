"""`blis-simpy observe`: drive a real OpenAI-compatible server with a scenario's workload and
write what it measured, in the formats `blis-simpy calibrate` and `validate-real` read.

The scenario's requests are drawn as a run would draw them (`workload sample`: arrival times,
prompt and output lengths, shared prefixes as shared token ids) and sent at their arrival
times, at most `concurrency` in flight (a request due while the limit is reached waits for a
free slot), for at most `duration_s` seconds: requests not yet sent by then are not sent, and
those in flight get `grace_s` more to finish. Each request's send time, TTFT, token chunks
and end-to-end latency go to `requests.jsonl`; `measured.json` is a measured set (validate/
sets.py) with one stage: the scenario's model, GPU, TP and load, and the statistics.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import check_replaceable, replacing
from blis_simpy.observe.client import Endpoint, Timing, complete
from blis_simpy.sim.sample import sample_requests
from blis_simpy.validate.sets import length_distribution, summary_stats

# Token ids sent: the scenario's ids folded into a range every tokenizer has, the same id
# always the same, so shared prefixes stay shared (and cacheable by the server).
TOKEN_BASE, TOKEN_SPAN = 1_000, 20_000


@dataclass(frozen=True, slots=True)
class Planned:
    at: float  # seconds after the start
    prompt: list[int]
    output_tokens: int


def plan(scenario: Scenario, limit: int | None = None) -> list[Planned]:
    """The scenario's requests, in arrival order (the first at time 0)."""
    sampled = sample_requests(resolve(scenario))
    if limit is not None:
        sampled = sampled[:limit]
    if not sampled:
        raise ScenarioError("workload", "generates no request to send")
    start = sampled[0][0].arrival
    out = []
    for req, tokens in sampled:
        prompt = [TOKEN_BASE + int(t) % TOKEN_SPAN for t in tokens[:req.input_len]]
        out.append(Planned((req.arrival - start) / 1e6, prompt, req.output_len))
    return out


@dataclass(frozen=True, slots=True)
class Observed:
    planned: Planned
    timing: Timing
    start: float  # the run's start on the monotonic clock


# The errors that mean nothing is listening there (`client.complete` names the exception)
UNREACHABLE = ("ConnectionRefusedError", "gaierror", "ConnectionError", "OSError")


async def drive(endpoint: Endpoint, model: str, requests: list[Planned], concurrency: int,
                duration_s: float, grace_s: float = 30.0,
                progress: Callable[[int, int], None] | None = None) -> list[Observed]:
    """Send `requests` at their times, `concurrency` at most in flight, for `duration_s`. A
    server that refuses or cannot be found before any request succeeded ends it at once (a
    mistyped --url is not an hour-long run)."""
    slots = asyncio.Semaphore(concurrency)
    start = time.perf_counter()
    stop_at = start + duration_s
    results: list[Observed] = []

    async def one(item: Planned) -> None:
        await asyncio.sleep(max(0.0, start + item.at - time.perf_counter()))
        async with slots:
            if time.perf_counter() >= stop_at:
                return
            left = stop_at + grace_s - time.perf_counter()
            timing = await complete(endpoint, model, item.prompt, item.output_tokens, left)
            if timing.error.startswith(UNREACHABLE) and not any(
                    not o.timing.error for o in results):
                raise ScenarioError("--url", f"the server is not reachable: {timing.error} "
                                    "(nothing written)")
            results.append(Observed(item, timing, start))
            if progress:
                progress(len(results), len(due))  # what will be sent, not the whole plan

    due = [item for item in requests if item.at < duration_s]
    await asyncio.gather(*(one(item) for item in due))
    return sorted(results, key=lambda o: o.timing.sent)


def record(o: Observed) -> dict[str, Any]:
    """One line of requests.jsonl (the per-request format validate/importers.py reads)."""
    t = o.timing
    row: dict[str, Any] = {"arrival_s": round(t.sent - o.start, 6),
                           "scheduled_s": round(o.planned.at, 6),
                           "input_tokens": len(o.planned.prompt),
                           "output_tokens": t.output_tokens or o.planned.output_tokens}
    if t.error or t.first_token is None or t.done is None:
        row["error"] = t.error or "no token"
        return row
    row["ttft_ms"] = round((t.first_token - t.sent) * 1e3, 3)
    row["e2e_ms"] = round((t.done - t.sent) * 1e3, 3)
    gaps = [b - a for a, b in zip(t.chunks, t.chunks[1:], strict=False)]
    if gaps:
        row["itl_ms_mean"] = round(statistics.fmean(gaps) * 1e3, 3)
    return row


def measured_set(scenario: Scenario, rows: list[dict[str, Any]], url: str, concurrency: int,
                 duration_s: float) -> dict[str, Any]:
    """The run as a measured set of one stage (its lengths, load and statistics)."""
    resolved = resolve(scenario)
    ok = [r for r in rows if "error" not in r]
    if not ok:
        raise ScenarioError(url, f"no request succeeded ({len(rows)} sent): "
                            + (rows[0].get("error", "") if rows else "none was sent"))
    measured: dict[str, Any] = {"completed": len(ok), "failed": len(rows) - len(ok)}
    for metric, key in (("ttft", "ttft_ms"), ("e2e", "e2e_ms")):
        measured[f"{metric}_ms"] = summary_stats([r[key] for r in ok])
    tpot = [(r["e2e_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in ok
            if r["output_tokens"] > 1]
    if tpot:
        measured["tpot_ms"] = summary_stats(tpot)
    first = min(r["arrival_s"] for r in rows)
    end = max(r["arrival_s"] + r["e2e_ms"] / 1e3 for r in ok)
    measured["duration_s"] = end - first
    measured["requests_per_s"] = len(ok) / measured["duration_s"]
    span = max(r["arrival_s"] for r in rows) - first
    load: dict[str, Any] = ({"arrival": "poisson", "rate": (len(rows) - 1) / span,
                             "requests": len(rows)} if span > 0 else
                            {"arrival": "burst", "requests": len(rows)})
    engine = resolved.engine
    return {
        "set": f"observed-{resolved.name or 'run'}", "title": f"{url} observed by blis-simpy",
        "source": {"endpoint": url}, "measured_by": "blis-simpy observe",
        "known": [f"the scenario's workload sent to {url}, at most {concurrency} in flight, "
                  f"for at most {duration_s:g} s; ignore_eos, prompts as token ids"],
        "guesses": ["GPU, TP and the engine's limits: the scenario's (the server's own were "
                    "not read)"],
        "stages": [{
            "name": "observed", "model": resolved.model.name, "gpu": resolved.model.gpu,
            "tp": resolved.model.tp, "server": {"family": "vllm", "version": ""},
            "engine": {"max_num_seqs": engine.max_running_requests,
                       "max_num_batched_tokens": engine.max_scheduled_tokens},
            "load": load,
            "prompt": length_distribution([r["input_tokens"] for r in rows]),
            "output": length_distribution([r["output_tokens"] for r in rows]),
            "measured": measured}]}


OUTPUTS = ("requests.jsonl", "measured.json")


def check_out(out: Path, force: bool = False) -> None:
    """`out` is (made) a folder whose outputs can be written (with `force`, over an earlier
    observation's): said before the server is driven for minutes, not after."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError("--out", f"cannot make the folder {out}: {exc.strerror or exc}") \
            from None
    for name in OUTPUTS:
        check_replaceable(out / name, "--out", "a folder for requests.jsonl and measured.json",
                          force)


def write(out: Path, rows: list[dict[str, Any]], measured: dict[str, Any],
          force: bool = False) -> None:
    texts = ("".join(json.dumps(r) + "\n" for r in rows), json.dumps(measured, indent=1) + "\n")
    for name, text in zip(OUTPUTS, texts, strict=True):
        with replacing(out / name, "--out", force=force) as temp:
            temp.write_text(text, encoding="utf-8")
