"""Write the parity traces that pin two reference behaviours (tests/data/parity/):

* trace_ties.csv: requests whose queueing delay ends at the very tick a step starts, some
  right after a step that completed a request, some not. The reference's instance event heap
  (timestamp only, Go container/heap) then runs the request's Queued event before or after
  that Step depending on the heap's shape; SimPy's FIFO would always run the Step first.
  Each tie is placed by simulating the trace so far (compat mode) and aiming the next arrival
  at a step boundary that falls after it, which later arrivals cannot move.
* trace_evict.csv: shared system prompts replayed through a small KV pool with a small token
  budget (run with --total-kv-blocks 100 --max-num-scheduled-tokens 100): cached prefixes
  are evicted and revived all the time, chunked prefills leave partly filled and empty
  blocks, several requests register the same prefix hash, and some prompts are exactly a
  cached prefix.

* trace_completion_alloc.csv: two requests that fill a 3-block pool (run with
  --total-kv-blocks 3) when the first completes.

    python scripts/make_parity_traces.py ties|evict|completion

The reference outputs beside them come from the Go binary (see tests/test_parity.py).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "parity"
ALPHA = [232.46191091038054, 1.752360364195244, 3357.4400353290152]
BETA = [5752.705191348184, 17.25086436834028, 5.999143920128404]
MODEL = "meta-llama/llama-3.1-8b-instruct"


def row(i: int, arrival_us: int, prompt: list[int], output: list[int]) -> str:
    # The reference truncates int64(s*1e6); half a microsecond more lands on arrival_us.
    seconds = f"{(arrival_us + 0.5) / 1e6:.7f}"
    assert int(float(seconds) * 1e6) == arrival_us
    return (f'{seconds},req_{i},{MODEL},"[{",".join(map(str, prompt))}]",'
            f'"[{",".join(map(str, output))}]"')


def write(path: Path, rows: list[str]) -> None:
    path.write_text("arrival_time,request_id,model,prefill_tokens,decode_tokens\n"
                    + "\n".join(rows) + "\n")


def simulate_steps(rows: list[str]) -> tuple[list[tuple[int, int]], set[int]]:
    """(start, duration) of every step of a one-instance compat replay, and the step ends at
    which a request completed."""
    import blis_simpy
    from blis_simpy.config.scenario import Scenario

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        write(path, rows)
        result = blis_simpy.run(Scenario.from_dict({
            "version": 1, "compat": "blis", "seed": 42,
            "model": {"name": MODEL, "gpu": "H100", "tp": 1},
            "latency": {"alpha": ALPHA, "beta": BETA},
            "engine": {"kv_blocks": 29205},
            "workload": {"type": "trace", "path": str(path)},
        }))
    steps = result.steps
    starts = np.rint(steps["start_s"].to_numpy() * 1e6).astype(int)
    durations = np.rint(steps["duration_ms"].to_numpy() * 1e3).astype(int)
    done = result.requests["completion_s"].dropna().to_numpy()
    ends = {int(np.rint(t * 1e6)) - int(ALPHA[2]) for t in done}
    return list(zip(starts.tolist(), durations.tolist(), strict=True)), ends


def ties(rng: np.random.Generator, count: int = 40) -> list[str]:
    tokens = lambda n: rng.integers(0, 128_000, n).tolist()  # noqa: E731
    rows: list[str] = []
    clock = 0
    for _ in range(4):  # a few requests to get a batch going
        rows.append(row(len(rows), clock, tokens(int(rng.integers(64, 400))),
                        tokens(int(rng.integers(4, 40)))))
        clock += int(rng.integers(2_000, 20_000))
    made = 0
    while made < count:
        steps, ends = simulate_steps(rows)
        want_completion = made % 2 == 0
        placed = False
        for start, duration in steps:
            end = start + duration
            if start <= clock or (end in ends) != want_completion:
                continue
            if not any(s == end for s, _ in steps):
                continue  # the batch emptied: no step at that tick
            for _ in range(50):
                length = int(rng.integers(16, 600))
                arrival = end - int(ALPHA[0] + ALPHA[1] * length)
                if start < arrival and clock <= arrival:
                    rows.append(row(len(rows), arrival, tokens(length),
                                    tokens(int(rng.integers(1, 30)))))
                    clock = arrival
                    placed = made = made + 1
                    break
            if placed:
                break
        if not placed:  # nothing suitable ahead: add an ordinary request a little later
            clock += int(rng.integers(5_000, 30_000))
            rows.append(row(len(rows), clock, tokens(int(rng.integers(16, 300))),
                            tokens(int(rng.integers(8, 60)))))
    return rows


def evict(rng: np.random.Generator, count: int = 120) -> list[str]:
    """Requests on one of two system prompts (304 and 496 tokens, whole blocks), one every
    ~60 ms on average, with tails of 1-29 tokens (every 12th request is exactly its system
    prompt: a full prefix hit) and 1-9 output tokens. Token ids are small (3 digits) to keep
    the file small. Run with --total-kv-blocks 100 --max-num-scheduled-tokens 100: prompts
    are prefilled in chunks that do not end on block boundaries, and the pool holds about
    one request's blocks besides the cached prefixes."""
    tokens = lambda n: rng.integers(1, 1000, n).tolist()  # noqa: E731
    prompts = [tokens(n) for n in (304, 496)]
    rows: list[str] = []
    clock = 0
    for i in range(count):
        clock += int(rng.exponential(60_000))
        prompt = prompts[int(rng.integers(0, len(prompts)))]
        tail = [] if i % 12 == 11 else tokens(int(rng.integers(1, 30)))
        rows.append(row(i, clock, prompt + tail, tokens(int(rng.integers(1, 10)))))
    return rows


def completion() -> list[str]:
    """Three KV blocks of 16 tokens: request 0 (16 prompt, 17 output tokens) holds two of
    them when it completes, request 1 the third, so the reference's extra allocation at
    completion finds no free block (its summary then reports kv_allocation_failures)."""
    return [row(0, 0, list(range(1, 17)), list(range(100, 117))),
            row(1, 40_000, [5, 6], list(range(200, 212)))]


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "ties":
        rows = ties(np.random.default_rng(11))
        write(OUT / "trace_ties.csv", rows)
    elif which == "evict":
        rows = evict(np.random.default_rng(57))
        write(OUT / "trace_evict.csv", rows)
    elif which == "completion":
        rows = completion()
        write(OUT / "trace_completion_alloc.csv", rows)
    else:
        raise SystemExit("usage: make_parity_traces.py ties|evict|completion")
    print(f"wrote {len(rows)} requests")


if __name__ == "__main__":
    main()
