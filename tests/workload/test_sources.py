"""Workload sources: native arrivals and lengths, the compat generator (trace parsing:
test_trace.py)."""

from __future__ import annotations

import numpy as np

from blis_simpy.config.resolve import resolve
from blis_simpy.sim.modes import mode_of
from blis_simpy.workload.source import requests_of
from blis_simpy.workload.synthetic import round_half_away
from tests.conftest import scenario


def workload_requests(s):
    return requests_of(s, reference_draws=mode_of(s).reference_draws).requests


def test_native_arrivals_are_poisson_by_default():
    """Exponential gaps: mean 1/rate and coefficient of variation 1 (the reference spaces
    requests evenly). 20,000 gaps: the CV's standard error is under 0.01."""
    s = resolve(scenario(workload={"num_requests": 20_000, "rate_per_s": 50,
                                   "prompt": {"mean": 8, "stdev": 0, "min": 8, "max": 8},
                                   "output": {"mean": 1, "stdev": 0, "min": 1, "max": 1}}))
    arrivals = np.array([r.arrival for r in workload_requests(s)])
    gaps = np.diff(arrivals)
    assert abs(gaps.mean() - 20_000) / 20_000 < 0.03
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05


def test_compat_arrivals_are_constant_spacing_truncated():
    s = resolve(scenario(compat="blis", workload={"num_requests": 4, "rate_per_s": 10}))
    assert [r.arrival for r in workload_requests(s)] == [0, 99999, 199998, 299997]


def test_native_lengths_are_clamped_gaussians_never_zero():
    s = resolve(scenario(workload={"num_requests": 3000,
                                   "prompt": {"mean": 20, "stdev": 40, "min": 1, "max": 60}}))
    lengths = np.array([r.input_len for r in workload_requests(s)])
    assert lengths.min() == 1 and lengths.max() == 60
    assert 20 < lengths.mean() < 32  # clamping shifts the mean up


def test_round_half_away_from_zero_like_go():
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, -0.5, 2.4999999)] == [1, 2, 3, -1, 2]
    assert round_half_away(0.49999999999999994) == 0


def test_compat_hashed_draws_equal_the_requests_hashed_one_by_one():
    """The compat source's fused path (token ids drawn and hashed a chunk at a time, never an
    array per request) gives the requests, lengths and block hashes of the plain generator
    hashed request by request: with and without a shared prefix, across chunks, and with
    sequences shorter than a block."""
    from blis_simpy.workload.prehash import hash_request
    from blis_simpy.workload.source import compat_hashed
    from blis_simpy.workload.synthetic import compat_drawn, compat_requests

    for prefix in (0, 37):
        s = resolve(scenario(compat="blis", workload={
            "num_requests": 300, "rate_per_s": 10, "prefix_tokens": prefix,
            "prompt": {"mean": 40, "stdev": 30, "min": 1, "max": 200},
            "output": {"mean": 20, "stdev": 15, "min": 1, "max": 100}}))
        spec, seed = s.workload, s.workload_seed
        plain = list(compat_requests(spec, seed, None))
        for req in plain:
            hash_request(req, 16)
        fused = list(compat_hashed(compat_drawn(spec, seed, None), 16, chunk_tokens=1000))
        assert [(r.index, r.arrival, r.input_len, r.output_len, r.prefill_target,
                 r.max_tokens, r.hashes, r.tokens, r.hashed) for r in fused] == [
            (r.index, r.arrival, r.input_len, r.output_len, r.prefill_target, r.max_tokens,
             r.hashes, r.tokens, r.hashed) for r in plain]
        assert any(r.hashes for r in plain)
        assert prefix or any(not r.hashes for r in plain)  # a sequence under one block
