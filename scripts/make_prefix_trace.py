"""Write scenarios/data/prefix-groups.csv: a trace where requests share one of four system
prompts (so prefix caching and prefix-aware routing have something to find).

    python scripts/make_prefix_trace.py [--requests 400] [--rate 24] [--seed 7]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "scenarios" / "data" / "prefix-groups.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rate", type=float, default=80.0, help="requests per second")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    prompts = [rng.integers(0, 128_000, n).tolist() for n in (256, 512, 768, 1024)]
    clock = 0.0
    lines = ["arrival_time,request_id,model,prefill_tokens,decode_tokens"]
    for i in range(args.requests):
        clock += rng.exponential(1 / args.rate)
        group = int(rng.integers(0, 4))
        tail = rng.integers(0, 128_000, int(rng.integers(16, 256))).tolist()
        output = rng.integers(0, 128_000, int(rng.integers(8, 160))).tolist()
        prompt = ",".join(map(str, prompts[group] + tail))
        lines.append(f'{clock:.6f},req_{i},meta-llama/llama-3.1-8b-instruct,"[{prompt}]",'
                      f'"[{",".join(map(str, output))}]"')
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({len(lines) - 1} requests)")


if __name__ == "__main__":
    main()
