"""Issue 34 item 5: the seed's policy interfaces (seed 000 G.1)."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.core.errors import PolicyError
from blis_simpy.core.request import NO_HINTS, Request, RequestView
from blis_simpy.engine.step import Stepper
from blis_simpy.policies.guard import guarded
from blis_simpy.policies.priority import PriorityDecision, PriorityPolicy
from blis_simpy.search.code import CodePolicy, check
from blis_simpy.search.sweep import run_many
from tests.search.test_remote import COMPARED, PRIORITY, in_process, pressed

HINTED = PRIORITY.replace(
    "        return base - busy",
    "        score = base - busy").rstrip() + """
        return PriorityDecision(score, {"deadline_us": req.arrival_us + 50_000,
                                        "tier": req.slo_class, "urgent": base > 0,
                                        "note": None})
"""


class Hinted(PriorityPolicy):
    def __init__(self, hints: object) -> None:
        super().__init__()
        self.hints = hints

    def compute(self, req, state, clock):
        return PriorityDecision(2.5, self.hints)  # type: ignore[arg-type]


VIEW = RequestView("r0", 0, 10, "t", "interactive", ())


def test_g1_priority_decision_carries_hints():
    """Seed 000 G.1 (PriorityDecision{Score, Hints}): a priority policy may return a
    PriorityDecision with hints instead of a float. The guard checks and copies the hints
    (plain data only), the step's rescoring keeps them on the request, and a sandboxed
    candidate returning one decides exactly as the float-returning source and as the same
    source in process."""
    guard = guarded(Hinted({"deadline_us": 5, "tier": "gold"}), PriorityPolicy, "p", "Hinted")
    out = guard.compute(VIEW, None, 0)
    assert isinstance(out, PriorityDecision) and out.score == 2.5
    assert dict(out.hints) == {"deadline_us": 5, "tier": "gold"}
    for bad in ({"nested": {"a": 1}}, {1: 2}, {"x": float("nan")}, [("a", 1)],
                {f"k{i}": i for i in range(40)}):
        with pytest.raises(PolicyError, match="PriorityDecision"):
            guarded(Hinted(bad), PriorityPolicy, "p", "Hinted").compute(VIEW, None, 0)
    # a float is still a priority, with no hints; the step's rescoring keeps a decision's
    req = Request(0, 0, np.ones(10, dtype=np.int64), np.ones(4, dtype=np.int64))
    assert req.priority_hints is NO_HINTS
    Stepper._rescore([req], 0, guard)
    assert req.priority == 2.5 and dict(req.priority_hints) == {"deadline_us": 5,
                                                                "tier": "gold"}
    # sandboxed: same decisions as the float source and as in process
    code = CodePolicy("priority", HINTED)
    check(code)
    hinted = run_many(pressed(), {"hinted": code}, [1], workers=1)
    plain = run_many(pressed(), {"plain": CodePolicy("priority", PRIORITY)}, [1], workers=1)
    local = run_many(in_process("priority", HINTED), None, [1], workers=1)
    assert list(hinted.error) == [""] and list(local.error) == [""]
    for column in COMPARED:
        assert list(hinted[column]) == list(plain[column]) == list(local[column]), column
