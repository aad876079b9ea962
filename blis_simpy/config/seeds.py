"""The run's seeds, split as the seed's SimulationKey splits them (001 §13: a policy, a
workload seed, a simulation seed and a jitter seed).

A run is determined by its scenario: the policy is its `policies` section, and the three
seeds default to the scenario's single `seed`. Every random stream is named by its subsystem
(`rng/streams.py`), so one seed already gives independent streams; `seeds:` lets a study hold
one part fixed while it varies another, e.g. the same requests (`workload`) under different
failure draws (`sim`) or provisioning delays (`jitter`). A seed left unset is `seed`, so a
scenario without the section runs exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_simpy.core.schema import spec


@dataclass(frozen=True, slots=True)
class SeedsConfig:
    workload: int | None = spec(
        None, help="the requests: arrival times, lengths, token ids, tenants' sessions and "
        "choices, a trace's synthesised ids (the reference's generator in compat mode); "
        "default: seed")
    sim: int | None = spec(
        None, help="the simulation's own chance events: fault crash and repair times; "
        "default: seed")
    jitter: int | None = spec(
        None, help="timing noise: replica provisioning and warm-up delays drawn from their "
        "distributions, node provisioning times; default: seed")
