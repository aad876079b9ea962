"""Write the small sample traces under scenarios/data/ in the published layouts of the Azure
LLM inference trace, BurstGPT and Mooncake (docs/traces.md). The rows are synthetic, drawn
here from a fixed seed with lengths shaped like the published traces' summaries; no row is
copied from a real trace.

    python scripts/make_trace_samples.py
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "scenarios" / "data"


def azure(rng: np.random.Generator, path: Path, rows: int = 300) -> None:
    """Code-completion-like: long contexts, short completions, ~6 requests/s in bursts."""
    start = datetime.datetime(2023, 11, 16, 18, 15, 46)
    ticks = np.cumsum(rng.exponential(1 / 6, rows)) * 10**7  # 100 ns units
    ticks -= ticks[0]
    context = np.clip(rng.lognormal(np.log(1500), 0.7, rows), 20, 7500).astype(int)
    generated = np.clip(rng.lognormal(np.log(25), 0.8, rows), 1, 600).astype(int)
    with path.open("w", newline="") as out:
        out.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for tick, c, g in zip(ticks.astype(np.int64).tolist(), context, generated, strict=True):
            stamp = start + datetime.timedelta(microseconds=tick // 10)
            out.write(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}{tick % 10},{c},{g}\n")


def burstgpt(rng: np.random.Generator, path: Path, rows: int = 400) -> None:
    """Two models, conversation and API logs, bursts, and ~4% failed requests (0 response
    tokens)."""
    seconds = np.cumsum(rng.exponential(1 / 8, rows)).round().astype(int) + 5
    models = rng.choice(["ChatGPT", "GPT-4"], rows, p=[0.8, 0.2])
    logs = rng.choice(["Conversation log", "API log"], rows, p=[0.6, 0.4])
    request = np.clip(rng.lognormal(np.log(600), 0.9, rows), 1, 6000).astype(int)
    response = np.clip(rng.lognormal(np.log(250), 0.7, rows), 1, 1500).astype(int)
    response[rng.random(rows) < 0.04] = 0
    with path.open("w", newline="") as out:
        out.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for row in zip(seconds, models, request, response, logs, strict=True):
            t, model, req, resp, log = row
            out.write(f"{t},{model},{req},{resp},{req + resp},{log}\n")


def mooncake(rng: np.random.Generator, path: Path, rows: int = 300) -> None:
    """Conversations over a few shared system prompts: each request's hash ids start with its
    system prompt's blocks, then its conversation's earlier blocks, then new ones."""
    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        next_id += count
        return list(range(next_id - count, next_id))

    systems = [fresh(int(n)) for n in rng.integers(2, 7, 5)]
    conversations: list[list[int]] = []
    stamp = 0
    with path.open("w") as out:
        for _ in range(rows):
            stamp += int(rng.exponential(150))
            if conversations and rng.random() < 0.5:  # a later turn of a conversation
                index = int(rng.integers(len(conversations)))
                ids = conversations[index] + fresh(int(rng.integers(1, 3)))
                conversations[index] = ids
            else:
                ids = systems[int(rng.integers(len(systems)))] + fresh(int(rng.integers(1, 4)))
                conversations.append(ids)
            length = 512 * (len(ids) - 1) + int(rng.integers(1, 513))
            record = {"timestamp": stamp, "input_length": length,
                      "output_length": int(rng.integers(20, 400)), "hash_ids": ids}
            out.write(json.dumps(record) + "\n")


def main() -> None:
    rng = np.random.default_rng(2025)
    azure(rng, DATA / "azure-code-sample.csv")
    burstgpt(rng, DATA / "burstgpt-sample.csv")
    mooncake(rng, DATA / "mooncake-sample.jsonl")


if __name__ == "__main__":
    main()
