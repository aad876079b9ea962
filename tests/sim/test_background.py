"""A value computed on another thread: returned, or its error raised, in the caller's thread."""

from __future__ import annotations

import threading

import pytest

from blis_simpy.sim.background import Background


def test_the_value_is_computed_on_another_thread_and_returned():
    caller = threading.get_ident()
    job = Background(lambda: (threading.get_ident(), sum(range(1000))), "sum")
    worker, total = job.result()
    assert total == 499_500
    assert worker != caller


def test_an_error_in_the_work_is_raised_by_result():
    def broken() -> int:
        raise ValueError("no rows")

    job = Background(broken, "broken")
    with pytest.raises(ValueError, match="no rows"):
        job.result()
