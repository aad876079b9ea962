"""The compat results.json is rendered from a row template for speed; it must be the bytes
the generic Go-JSON encoder gives for the same rows, with rows and without."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.compat import gojson
from blis_simpy.compat.results import ReferenceOutputs, reference_summary
from tests.conftest import scenario


def generic(ref: ReferenceOutputs) -> str:
    return gojson.dumps({**reference_summary(ref.summary), "requests": ref.row_dicts()}) + "\n"


def compat_run() -> ReferenceOutputs:
    sc = scenario(compat="blis", cluster={"instances": 3},
                  workload={"arrival": "constant", "num_requests": 60, "rate_per_s": 50})
    ref = blis_simpy.run(sc).reference
    assert ref is not None
    return ref


def test_template_matches_the_generic_encoder() -> None:
    ref = compat_run()
    assert len(ref.ids) == 60 and len(set(ref.handled_by)) == 3
    assert ref.results_json() == generic(ref)


def test_odd_values_and_names_are_encoded_as_go_does() -> None:
    ref = compat_run()
    odd = dataclasses.replace(
        ref, ids=[f"r<{i}>" for i in range(len(ref.ids))],
        handled_by=["inst\u2028&" for _ in ref.ids],
        itl_mean=np.full(len(ref.ids), 1e-7), arrival=ref.arrival[::-1].copy())
    assert odd.results_json() == generic(odd)


def test_no_rows_give_an_empty_list() -> None:
    ref = compat_run()
    empty = np.array([], dtype=np.int64)
    none = dataclasses.replace(ref, ids=[], handled_by=[], arrival=empty, input_len=empty,
                               output_len=empty, ttft=empty, itl_mean=empty.astype(float),
                               e2e=empty, scheduling_delay=empty)
    text = none.results_json()
    assert text == generic(none) and text.endswith('"requests": []\n}\n')


@given(st.lists(st.integers(0, 5), min_size=0, max_size=40), st.booleans())
def test_rows_are_ordered_by_arrival_then_id(arrivals: list[int], increasing: bool) -> None:
    """Whether the rows are in file order already (the fast path) or sorted, the order is
    by arrival time then id (ids as text: request_10 before request_9)."""
    ref = compat_run_once()
    times = np.cumsum(np.array(arrivals, dtype=np.int64) + 1) if increasing else \
        np.array(arrivals, dtype=np.int64)
    ids = [f"request_{i}" for i in range(len(times))]
    rows = dataclasses.replace(ref, ids=ids, arrival=times)
    expected = sorted(range(len(ids)), key=lambda i: (int(times[i]), ids[i]))
    assert rows.order() == expected


@cache
def compat_run_once() -> ReferenceOutputs:
    return compat_run()


def test_written_a_block_of_rows_at_a_time_it_is_the_same_file(tmp_path) -> None:
    """`write` streams results.json in parts; any block size gives the whole text's bytes."""
    ref = compat_run()
    whole = ref.results_json()
    for rows_per_part in (1, 7, 59, 60, 61, 10_000):
        assert "".join(ref.results_json_parts(rows_per_part)) == whole
    ref.write(tmp_path)
    assert (tmp_path / "results.json").read_text() == whole
    assert (tmp_path / "blis_stdout.txt").read_text() == ref.files()["blis_stdout.txt"]
