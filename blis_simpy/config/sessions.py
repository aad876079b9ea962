"""User archetypes and session Markov models of the tenants workload (seed 001 §7:
TenantArchetype, SessionMarkovModel), as data. Loaded only by scenarios that use them
(config/workload.py's LAZY_TYPES); the sources that draw from them are `blis_simpy.workload`.
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_simpy.config.distributions import Distribution
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec


@dataclass(frozen=True, slots=True)
class Archetype:
    """A kind of user (seed 001 §7 TenantArchetype): a request shape a tenant's traffic mixes."""

    id: str = spec(help="archetype name, referenced by tenants' archetypes mix")
    prompt: Distribution | None = spec(None, help="prompt length (tokens); default: the "
                                       "tenant's prompt")
    output: Distribution | None = spec(None, help="output length (tokens); default: the "
                                       "tenant's output")
    length_correlation: float | None = spec(
        None, help="Gaussian-copula correlation between prompt and output length (-1..1); "
        "default: the tenant's length_correlation", ge=-1, le=1)


@dataclass(frozen=True, slots=True)
class SessionState:
    id: str = spec(help="state name, e.g. browse, ask, follow-up")
    prompt: Distribution | None = spec(None, help="new message length (tokens) in this state; "
                                       "default: the tenant's prompt")
    output: Distribution | None = spec(None, help="output length (tokens) in this state; "
                                       "default: the tenant's output")
    think_time_s: Distribution | None = spec(
        None, help="think time after this state's response; default: chat.think_time_s")
    next: dict[str, float] = spec(
        factory=dict, help="transition probabilities to the next turn's state, by state id; "
        "what they leave below 1 ends the session")


@dataclass(frozen=True, slots=True)
class SessionModel:
    """A chat session as a Markov chain over turn states (seed 001 §7 SessionMarkovModel)."""

    start: str = spec(help="the first turn's state")
    states: list[SessionState] = spec(help="the turn states", min_len=1)
    max_turns: int = spec(64, help="a session ends after this many turns whatever its state",
                          ge=1, le=10_000)

    def validate(self, path: str) -> None:
        ids = [s.id for s in self.states]
        for i, state in enumerate(self.states):
            if state.id in ids[:i]:
                raise ScenarioError(join(path, f"states[{i}].id"), f"duplicate {state.id!r}")
            for target, p in state.next.items():
                where = join(path, f"states[{i}].next.{target}")
                if target not in ids:
                    raise ScenarioError(where, f"unknown state {target!r}", ", ".join(ids))
                if not 0 <= p <= 1:
                    raise ScenarioError(where, f"probability {p!r} is outside [0, 1]", "0..1")
            if sum(state.next.values()) > 1 + 1e-9:
                raise ScenarioError(join(path, f"states[{i}].next"), "probabilities sum to "
                                    f"{sum(state.next.values()):g}, above 1",
                                    "at most 1 (the rest ends the session)")
        if self.start not in ids:
            raise ScenarioError(join(path, "start"), f"unknown state {self.start!r}",
                                ", ".join(ids))
