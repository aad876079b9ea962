"""Bit-for-bit checks of blis_simpy.rng.gomath against vectors printed by real Go.

The vectors come from scripts/gen_go_rand_vectors.go (Go 1.19, amd64 with FMA); CI has
no Go toolchain, so everything here reads only the committed JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.rng.gomath import (
    _INV_RN,
    GoRand,
    _go_exp,
    _go_log,
    derived_seed,
    fnv1a64,
)

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "go_rand_vectors.json").read_text()
)
SEEDS = [entry["seed"] for entry in VECTORS["seeds"]]
VOCAB = 128000

# Each Go sequence starts from a fresh source: name -> (draw function, JSON value parser).
SCALAR_KINDS: dict[str, tuple[Callable[[GoRand], Any], Callable[[Any], Any]]] = {
    "int63": (GoRand.int63, int),
    "uint32": (GoRand.uint32, int),
    "int31": (GoRand.int31, int),
    "intn_128000": (lambda r: r.intn(VOCAB), int),
    "int31n_pow2": (lambda r: r.int31n(1024), int),
    "int31n_odd": (lambda r: r.int31n(1000003), int),
    "intn_huge": (lambda r: r.intn((1 << 40) + 3), int),
    "intn_heavy": (lambda r: r.intn((1 << 30) + 1), int),
    "float64": (GoRand.float64, float),
    "norm_float64": (GoRand.norm_float64, float),
}
BULK_KINDS = {
    "intn_128000": VOCAB,
    "int31n_pow2": 1024,
    "int31n_odd": 1000003,
    "intn_huge": (1 << 40) + 3,
    "intn_heavy": (1 << 30) + 1,
}


def _seed_entry(seed: int) -> dict[str, Any]:
    return next(entry for entry in VECTORS["seeds"] if entry["seed"] == seed)


@pytest.mark.parametrize("kind", sorted(SCALAR_KINDS))
@pytest.mark.parametrize("seed", SEEDS)
def test_scalar_sequences_match_go(seed: int, kind: str) -> None:
    draw, parse = SCALAR_KINDS[kind]
    expected = [parse(v) for v in _seed_entry(seed)[kind]]
    rng = GoRand(seed)
    assert [draw(rng) for _ in expected] == expected


@pytest.mark.parametrize("kind", sorted(BULK_KINDS))
@pytest.mark.parametrize("seed", SEEDS)
def test_intn_array_matches_go(seed: int, kind: str) -> None:
    """Int31n(n) and Intn(n) agree for n < 2^31, so every bounded sequence checks the bulk path."""
    expected = _seed_entry(seed)[kind]
    got = GoRand(seed).intn_array(BULK_KINDS[kind], len(expected))
    assert got.dtype == np.int64
    assert got.tolist() == expected


def test_intn_array_across_a_go_rejection() -> None:
    """Go rejected raw draw ``raw_index`` inside Intn(128000); bulk and scalar must skip it."""
    case = VECTORS["first_rejection"]
    start, expected = case["start_call"], case["values"]
    bulk = GoRand(case["seed"]).intn_array(case["n"], start + len(expected))
    assert bulk[start:].tolist() == expected

    mixed = GoRand(case["seed"])
    mixed.intn_array(case["n"], start + 3)  # stops just before the rejecting call
    tail = [mixed.intn(case["n"]) for _ in range(2)] + mixed.intn_array(case["n"], 5).tolist()
    assert tail == expected[3:]


def test_norm_float64_tail_path_matches_go() -> None:
    """The base-strip tail (needs Go's own Log) is rare; Go located a few hits for us."""
    case = VECTORS["norm_tail"]
    rng = GoRand(case["seed"])
    drawn: list[float] = []
    for hit in case["hits"]:
        while len(drawn) <= hit["index"] + 1:
            drawn.append(rng.norm_float64())
        assert drawn[hit["index"] - 1 : hit["index"] + 2] == [float(v) for v in hit["values"]]


def test_interleaved_workload_stream_matches_go() -> None:
    """Normal lengths and token ids drawn alternately, as the workload generator does."""
    case = VECTORS["interleaved"]
    rng = GoRand(case["seed"])
    for req in case["requests"]:
        in_norm = rng.norm_float64()
        assert in_norm == float(req["in_norm"])
        assert int(max(1.0, min(200.0, round(in_norm * 40 + 60)))) == req["in_len"]
        assert rng.intn_array(VOCAB, req["in_len"]).tolist() == req["tokens"]
        assert rng.norm_float64() == float(req["out_norm"])


@pytest.mark.parametrize("entry", VECTORS["fnv"], ids=lambda e: e["name"])
def test_fnv_and_derived_seeds_match_go(entry: dict[str, Any]) -> None:
    assert fnv1a64(entry["name"]) == entry["fnv1a64"]
    for seed, derived in entry["derived"].items():
        assert derived_seed(int(seed), entry["name"]) == derived


def test_go_log_and_exp_ports_match_go() -> None:
    """libm's log/exp differ from Go's amd64 routines by an ulp on a fair share of inputs."""
    m = VECTORS["math"]
    assert [_go_log(float(x)) for x in m["log_in"]] == [float(y) for y in m["log_out"]]
    assert [_go_exp(float(x)) for x in m["exp_in"]] == [float(y) for y in m["exp_out"]]
    assert float(m["inv_rn"]) == _INV_RN


def _scalar_then_check(seed: int, n: int, chunks: list[int]) -> None:
    """Interleave scalar and bulk Intn on one stream and compare with all-scalar draws."""
    reference = GoRand(seed)
    mixed = GoRand(seed)
    for i, count in enumerate(chunks):
        expected = [reference.intn(n) for _ in range(count)]
        if i % 2:
            got = mixed.intn_array(n, count).tolist()
        else:
            got = [mixed.intn(n) for _ in range(count)]
        assert got == expected
    assert mixed.int63() == reference.int63()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    n=st.sampled_from([1, 2, 3, 7, 1024, VOCAB, (1 << 30) + 1, (1 << 31) - 1, (1 << 40) + 3]),
    chunks=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=6),
)
def test_intn_array_equals_repeated_intn(seed: int, n: int, chunks: list[int]) -> None:
    _scalar_then_check(seed, n, chunks)


def test_intn_array_crosses_rejections_and_block_edges() -> None:
    """n = 2^30+1 rejects ~half of raw draws; the chunks straddle the generator's blocks."""
    _scalar_then_check(42, (1 << 30) + 1, [5000, 5000, 1, 9000, 3])
    heavy = GoRand(7).intn_array((1 << 30) + 1, 20000)
    scalar = GoRand(7)
    assert heavy.tolist() == [scalar.intn((1 << 30) + 1) for _ in range(20000)]


def test_bulk_then_other_draws_share_the_stream() -> None:
    a, b = GoRand(3), GoRand(3)
    a.intn_array(VOCAB, 10000)
    for _ in range(10000):
        b.intn(VOCAB)
    assert [a.norm_float64() for _ in range(500)] == [b.norm_float64() for _ in range(500)]
    assert a.float64() == b.float64()


def test_invalid_arguments() -> None:
    rng = GoRand(1)
    with pytest.raises(ValueError):
        rng.intn(0)
    with pytest.raises(ValueError):
        rng.intn_array(-1, 5)
    assert rng.intn_array(10, 0).size == 0


def test_bulk_draws_with_changing_bounds_across_many_blocks() -> None:
    """Bulk draws reduce a whole block once per bound: alternating bounds (each switch
    re-reduces), scalar draws in between and draws crossing block edges all give Go's
    sequence (checked against one Intn at a time over ~40 blocks of raw values)."""
    bulk, scalar = GoRand(11), GoRand(11)
    sizes = [700, 1, 33_000, 5, 9_000, 70_000, 2, 400] * 6
    for k, size in enumerate(sizes):
        n = (VOCAB, 1000, 3, (1 << 30) + 1)[k % 4]
        assert bulk.intn_array(n, size).tolist() == [scalar.intn(n) for _ in range(size)]
        assert bulk.norm_float64() == scalar.norm_float64()
