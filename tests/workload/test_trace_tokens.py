"""Synthesised trace token ids: drawn ahead in bulk, they are exactly the ids one draw per
request would give (the seed's stream, in row order), so replays keep their outputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.units import VOCAB
from blis_simpy.rng.streams import stream
from blis_simpy.workload import trace_tokens
from blis_simpy.workload.trace_tokens import TokenMaker


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**64 - 1),
       counts=st.lists(st.one_of(st.integers(0, 40), st.integers(60_000, 140_000)),
                       max_size=8))
def test_ids_drawn_ahead_are_the_ids_drawn_per_request(seed, counts):
    maker, rng = TokenMaker(seed), stream(seed, "workload.trace_tokens")
    for count in counts:
        ids = maker.unique(count)
        assert len(ids) == count
        assert (ids == rng.integers(0, VOCAB, count)).all()


def test_ids_are_drawn_a_chunk_at_a_time():
    maker = TokenMaker(1)
    maker.unique(5)
    drawn = len(maker.ahead)
    maker.unique(7)
    assert drawn == trace_tokens.AHEAD and len(maker.ahead) == drawn and maker.used == 12
    assert np.array_equal(maker.unique(3), maker.ahead[12:15])
