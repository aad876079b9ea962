"""A chat session's walk over its session model's turn states (seed 001 §7 SessionMarkovModel;
config/sessions.py). Interpreted, beside the compiled tenants source: the model's classes load
only for scenarios that have one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from blis_simpy.config.distributions import Distribution

if TYPE_CHECKING:
    from blis_simpy.config.sessions import SessionModel, SessionState


class SessionWalk:
    """Where one session is: its current state, moved on by that state's transition
    probabilities (in their written order) after each turn."""

    __slots__ = ("model", "rng", "state")

    def __init__(self, model: SessionModel, rng: np.random.Generator) -> None:
        self.model, self.rng = model, rng
        self.state: SessionState = self.find(model.start)

    @property
    def max_turns(self) -> int:
        return self.model.max_turns

    def find(self, state_id: str) -> SessionState:
        return next(s for s in self.model.states if s.id == state_id)

    def lengths(self, prompt: Distribution, output: Distribution
                ) -> tuple[Distribution, Distribution]:
        """This turn's message and output length distributions (the state's where set)."""
        return self.state.prompt or prompt, self.state.output or output

    def think(self, default: Distribution) -> Distribution:
        """The think time after this turn's response."""
        return self.state.think_time_s or default

    def advance(self) -> bool:
        """Move to the next turn's state; False: the session ends here."""
        u = self.rng.random()
        cumulative = 0.0
        for target, p in self.state.next.items():
            cumulative += p
            if u < cumulative:
                self.state = self.find(target)
                return True
        return False
