"""The compat results.json is rendered from a row template for speed; it must be the bytes
the generic Go-JSON encoder gives for the same rows, with rows and without."""

from __future__ import annotations

import dataclasses

import numpy as np

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
