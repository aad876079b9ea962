"""Step rows (their fields one after another) are packed into int64 arrays a chunk at a time
while a run goes on: the packed rows are the rows, in order, and a long run's steps continue
across the chunk boundaries."""

from __future__ import annotations

import numpy as np

import blis_simpy
from blis_simpy.core.records import STEP_CHUNK, STEP_FIELDS, STEP_VALUES, InstanceLog
from blis_simpy.core.snapshot import Role


def test_packed_rows_are_the_rows_in_order():
    log = InstanceLog("instance_0", Role.MONOLITHIC, 100)
    rows = [(i * 10, 7 + i, i % 3, 1, 2, i % 100, 0) for i in range(2 * STEP_CHUNK + 17)]
    for row in rows:
        log.steps.extend(row)
        if len(log.steps) == STEP_VALUES:  # as the instance does
            log.pack()
    assert log.packed == 2 * STEP_CHUNK and len(log.steps) == 17 * len(STEP_FIELDS)
    assert log.last_duration() == rows[-1][1]
    packed = log.rows()
    assert log.last_duration() == rows[-1][1] and not log.steps
    assert packed.dtype == np.int64 and packed.shape == (len(rows), len(STEP_FIELDS))
    assert np.array_equal(packed, np.array(rows))
    assert InstanceLog("instance_1", Role.MONOLITHIC, 100).last_duration() == 0


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
