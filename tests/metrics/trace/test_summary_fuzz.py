"""Fuzzing summary_text's arguments: any value is either a clear ValueError or a text within
the bound, and the same arguments give the same text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.metrics.trace.summary import STRATEGIES
from tests.conftest import scenario


@pytest.fixture(scope="module")
def result() -> blis_simpy.Result:
    return blis_simpy.run(scenario(cluster={"instances": 3, "trace_level": "decisions"},
                                   policies={"routing": {"type": "always-busiest"}},
                                   evaluation={"slo_targets": {"": {"ttft_ms": 30}}}))


ARGS = st.one_of(st.integers(-10, 5000), st.sampled_from([None, True, 1.5, "1000", 10**9]))


@settings(max_examples=150, deadline=None)
@given(max_tokens=ARGS, strategy=st.one_of(st.sampled_from(STRATEGIES), st.text(max_size=8)))
def test_any_arguments_give_a_bounded_text_or_a_clear_error(result, max_tokens, strategy):
    try:
        text = result.summary_text(max_tokens=max_tokens, strategy=strategy)
    except ValueError as exc:
        assert "max_tokens" in str(exc) or "strategy" in str(exc)
        return
    assert len(text) <= 4 * max_tokens
    assert text == result.summary_text(max_tokens=max_tokens, strategy=strategy)
