"""The `faults:` section: instances that crash (at given times, or at random with MTBF/MTTR
drawn from the "faults" stream), whole pools lost at once, instances slowed for a while, and
what becomes of the requests a failed instance held (lost, or sent again with a retry limit
and back-off). Native mode only: the reference BLIS has no failures.

Instances are named by id (`instance_<n>`, those running at t=0) or by deployment config (all
of its replicas at that moment; a P/D config's pools as `<id>/prefill`, `<id>/decode`); naming
neither means every instance. The injector is `cluster/faults.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from blis_simpy.config.distributions import Distribution, mean_of
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_SIM_S, TICK_S, US_PER_S

INSTANCE_ID = re.compile(r"instance_(0|[1-9][0-9]{0,8})")
MIN_MTBF_S = 1e-3  # shorter mean times between failures would crash instances in a loop
MAX_RETRIES = 20  # back-offs double with every retry: 2^20 times the first is ~12 days at 1 s

INSTANCES_HELP = ("instance ids (instance_<n>, running at t=0); with `config` unset and "
                  "this empty: every instance")
CONFIG_HELP = ("instead of ids: every replica of this deployment config at that moment (its "
               "id; a P/D config's pools as <id>/prefill, <id>/decode)")


def at_least_a_tick(seconds: float | None, path: str) -> None:
    """A duration that may be 0 (at once) must, when positive, last at least the clock's
    tick: a shorter one rounds to 0 µs and would mean "at once" unsaid."""
    if seconds is not None and 0 < seconds < TICK_S:
        raise ScenarioError(path, f"{seconds!r} s rounds to 0 µs, the clock's tick",
                            f"0 (at once), or >= {TICK_S:g}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Targeted:
    """Which instances a fault hits: by id, by deployment config, or (neither) all of them."""

    instances: list[str] = spec(factory=list, help=INSTANCES_HELP)
    config: str | None = spec(None, help=CONFIG_HELP)

    def validate(self, path: str) -> None:
        if self.instances and self.config is not None:
            raise ScenarioError(join(path, "config"), "names instances already listed in "
                                "`instances`", "one of instances or config")
        for i, name in enumerate(self.instances):
            if not INSTANCE_ID.fullmatch(name):
                raise ScenarioError(join(join(path, "instances"), i), f"{name!r} is not an "
                                    "instance id", "instance_0, instance_1, ...")


@dataclass(frozen=True, slots=True, kw_only=True)
class Crash(Targeted):
    """Instances that crash at a given time: every request in them is lost (see `requests`),
    their KV caches with them."""

    at_s: float = spec(help="when (s)", ge=0, le=MAX_SIM_S)
    repair_s: float | None = spec(
        None, help="down this long (s), then serving again with an empty KV cache; null: "
        "never (an autoscaler keeps the pool at its min)", ge=0, le=MAX_SIM_S)
    reason: str = spec("crash", help="a label for the records (node loss, OOM, ...)")

    def validate(self, path: str) -> None:
        Targeted.validate(self, path)
        at_least_a_tick(self.repair_s, join(path, "repair_s"))


@dataclass(frozen=True, slots=True, kw_only=True)
class RandomCrashes(Targeted):
    """Each instance named crashes after a time drawn from `mtbf_s` of serving, and is back
    after a time drawn from `mttr_s`, over and over (both from the "faults" stream); replicas
    a config adds later are included."""

    mtbf_s: Distribution = spec(help="time between failures of one instance (s): from its "
                                "start, or its last repair, to its next crash")
    mttr_s: Distribution | None = spec(None, help="time to repair (s); null: never repaired")

    def validate(self, path: str) -> None:
        Targeted.validate(self, path)
        if not mean_of(self.mtbf_s) >= MIN_MTBF_S:
            raise ScenarioError(join(path, "mtbf_s"), f"has mean {mean_of(self.mtbf_s):g} s: "
                                "instances would crash in a loop",
                                f"a distribution with mean >= {MIN_MTBF_S:g} s")


@dataclass(frozen=True, slots=True, kw_only=True)
class Slowdown(Targeted):
    """Instances whose steps take `factor` times as long for a while (thermal throttling, a
    noisy neighbour, a degraded link)."""

    at_s: float = spec(help="from when (s)", ge=0, le=MAX_SIM_S)
    for_s: float = spec(help="for how long (s)", gt=0, le=MAX_SIM_S)
    factor: float = spec(help="step-time factor (2: twice as slow)", gt=0, le=1000)


@dataclass(frozen=True, slots=True)
class RequestRecovery:
    """What the gateway does with a request a failed instance held (or one with no routable
    instance to go to): send it again from scratch, its latencies still counted from its
    first arrival, after `backoff_s`, doubling with every retry; once `max_retries` are used
    (or with `lose`) the request ends `failed`."""

    on_failure: Literal["retry", "lose"] = spec("retry", help="retry: send it again; lose: it "
                                                "fails at once")
    max_retries: int = spec(3, help="retries per request", ge=0, le=MAX_RETRIES)
    backoff_s: float = spec(0.1, help="wait before the first retry (s); each later one waits "
                            "twice as long", ge=0, le=MAX_SIM_S)

    def validate(self, path: str) -> None:
        at_least_a_tick(self.backoff_s, join(path, "backoff_s"))
        longest = self.backoff_s * 2 ** max(self.max_retries - 1, 0)
        if longest > MAX_SIM_S:
            raise ScenarioError(join(path, "backoff_s"), f"doubled {self.max_retries - 1} "
                                f"times is {longest:g} s, past any run",
                                f"at most {MAX_SIM_S / 2 ** max(self.max_retries - 1, 0):g}")

    @property
    def backoff_us(self) -> int:
        return round(self.backoff_s * US_PER_S)


@dataclass(frozen=True, slots=True)
class FaultsConfig:
    crashes: list[Crash] = spec(factory=list, help="crashes at given times")
    random_crashes: list[RandomCrashes] = spec(factory=list, help="crashes at random, by "
                                               "MTBF and MTTR")
    slowdowns: list[Slowdown] = spec(factory=list, help="instances slowed for a window")
    requests: RequestRecovery = spec(factory=RequestRecovery, help="what happens to the "
                                     "requests a failed instance held")

    def targets(self) -> list[tuple[str, Targeted]]:
        """Every fault with its path in the scenario (for the checks against the fleet)."""
        return [(f"faults.{name}[{i}]", entry)
                for name in ("crashes", "random_crashes", "slowdowns")
                for i, entry in enumerate(getattr(self, name))]
