"""Step rows (their fields one after another) are packed into int64 arrays a chunk at a time
while a run goes on: the packed rows are the rows, in order, and a long run's steps continue
across the chunk boundaries."""

from __future__ import annotations

import numpy as np
from librt.vecs import vec
from mypy_extensions import i64

import blis_simpy
from blis_simpy.api import build
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.records import STEP_CHUNK, STEP_FIELDS, InstanceLog
from blis_simpy.core.snapshot import Role


def test_packed_rows_are_the_rows_in_order():
    """Rows handed over in chunks of native int64 fields (as the instance does, the last
    chunk short) are the rows, in order."""
    log = InstanceLog("instance_0", Role.MONOLITHIC, 100)
    rows = [(i * 10, 7 + i, i % 3, 1, 2, i % 100, 2**40 + i) for i in range(2 * STEP_CHUNK + 17)]
    assert log.last_duration() == 0 and len(log.rows()) == 0
    for lo in range(0, len(rows), STEP_CHUNK):
        chunk: vec[i64] = vec[i64]([v for row in rows[lo:lo + STEP_CHUNK] for v in row])
        log.pack(chunk)
    log.pack(vec[i64]())  # an instance with no rows left over at the end
    packed = log.rows()
    assert log.packed == len(rows) and log.last_duration() == rows[-1][1]
    assert packed.dtype == np.int64 and packed.shape == (len(rows), len(STEP_FIELDS))
    assert np.array_equal(packed, np.array(rows))


def test_an_instance_reads_its_last_duration_before_and_after_handing_rows_over():
    inst = build(resolve(Scenario.from_yaml("scenarios/quickstart.yaml"))).fleet.get(
        "instance_0")
    assert inst is not None
    inst.queued_tokens = inst.token_budget  # one step's worth waiting: the wait is a step
    for i in range(STEP_CHUNK + 1):
        inst._record(i * 100, 50 + i, 0, 1, 1, 0, 0)
        assert inst.estimated_wait_ms() == (50 + i) / 1000
    assert inst.log.packed == STEP_CHUNK


def test_steps_continue_across_packed_chunks():
    """The sample Azure trace gives instance_0 more steps than one chunk: each step starts
    when the one before it has ended, the first of a chunk included."""
    steps = blis_simpy.run("scenarios/trace-azure-code.yaml").steps
    first = steps[steps.instance == "instance_0"]
    assert len(first) > STEP_CHUNK
    start = first.start_s.to_numpy()
    end = start + first.duration_ms.to_numpy() / 1000
    assert (first.step.to_numpy() == np.arange(len(first))).all()
    assert (start[1:] >= end[:-1] - 1e-9).all()
