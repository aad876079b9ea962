"""A deployment config's replica pool bounds (seed 001 §2): its own module so that the P/D
pools (`pd.py`) and the deployment configs (`deployment.py`) share it."""

from __future__ import annotations

from dataclasses import dataclass

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_INSTANCES


@dataclass(frozen=True, slots=True)
class ReplicaPool:
    """How many replicas a config may run: the autoscaler keeps min <= replicas <= max."""

    min: int = spec(1, help="fewest replicas (scale-to-zero is not modelled)", ge=1,
                    le=MAX_INSTANCES)
    max: int = spec(1, help="most replicas", ge=1, le=MAX_INSTANCES)
    initial: int | None = spec(None, help="replicas active at t=0; default: min", ge=1,
                               le=MAX_INSTANCES)

    def validate(self, path: str) -> None:
        if self.min > self.max:
            raise ScenarioError(join(path, "min"), f"{self.min} is above max {self.max}",
                                f"at most {self.max}")
        if self.initial is not None and not self.min <= self.initial <= self.max:
            raise ScenarioError(join(path, "initial"), f"{self.initial} is outside "
                                f"[min, max] = [{self.min}, {self.max}]",
                                f"{self.min}..{self.max}")

    @property
    def start(self) -> int:
        return self.min if self.initial is None else self.initial
