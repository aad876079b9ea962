"""The seed's SimulationKey (001 §13): a policy plus workload, simulation and jitter seeds.
`seed` alone still determines a run; `seeds:` sets one part without moving the others."""

from __future__ import annotations

import pytest

import blis_simpy
from blis_simpy.core.errors import ScenarioError
from tests.cluster.autoscale_helpers import run as autoscale_run
from tests.cluster.autoscale_helpers import scenario as autoscaled
from tests.conftest import scenario

CRASHES = {"random_crashes": [{"mtbf_s": {"type": "exponential", "mean": 0.3},
                               "mttr_s": {"type": "constant", "value": 0.05}}]}


def run(**changes):
    return blis_simpy.run(scenario(cluster={"instances": 2}, faults=CRASHES, **changes))


def crashes(result, other) -> list[tuple[float, str]]:
    """(time, instance) of each crash before either run ended."""
    end = min(r.faults.time_s.max() for r in (result, other))
    f = result.faults
    hit = f[(f.event == "crash") & (f.time_s < end)]
    return list(zip(hit.time_s, hit.instance, strict=True))


def test_simulation_key_has_workload_sim_and_jitter_seeds_defaulting_to_seed():
    """001 §13 SimulationKey{PolicyID, WorkloadSeed, SimSeed, JitterSeed}: each seed part
    defaults to `seed`, so a scenario without `seeds:` (or with every part equal to `seed`)
    runs exactly as before; each part set alone moves only its own streams."""
    plain = scenario(seed=7)
    assert (plain.workload_seed, plain.sim_seed, plain.jitter_seed) == (7, 7, 7)
    assert "seeds" not in plain.to_dict()  # omitted while unset: scenario.yaml unchanged
    base = run()
    same = run(seeds={"workload": 7, "sim": 7, "jitter": 7})  # the conftest scenario's seed
    assert same.requests.equals(base.requests) and same.faults.equals(base.faults)

    other_requests = run(seeds={"workload": 9})
    assert not other_requests.requests.arrival_s.equals(base.requests.arrival_s)
    # the crash times come from the sim seed, which did not move (up to the shorter run's end)
    assert crashes(other_requests, base) == crashes(base, other_requests)

    other_faults = run(seeds={"sim": 9})
    assert crashes(other_faults, base) != crashes(base, other_faults)
    assert other_faults.requests.arrival_s.equals(base.requests.arrival_s)
    assert other_faults.requests.input_tokens.equals(base.requests.input_tokens)

    # the master seed moves every part that is not pinned
    pinned = run(seed=9, seeds={"workload": 7})
    assert pinned.requests.arrival_s.equals(base.requests.arrival_s)
    assert crashes(pinned, base) != crashes(base, pinned)
    # the key's policy and workload parts name what a search pairs runs on (the same requests)
    assert pinned.evaluation.workload_id == base.evaluation.workload_id
    assert other_requests.evaluation.workload_id != base.evaluation.workload_id
    assert pinned.evaluation.policy_id == base.evaluation.policy_id


def test_simulation_key_jitter_seed_moves_only_provisioning_delays():
    """001 §13 JitterSeed ("for timing noise, if any"): the replicas' drawn start-up delays
    move with it; the requests do not."""
    data = autoscaled({"type": "threshold", "params": {"signal": "queue_depth", "up": 2,
                                                        "down": 0.5, "cooldown_s": 0}},
                      rate=40, duration=8.0, actuation={
                          "provisioning_s": {"type": "exponential", "mean": 1.0}})
    base = autoscale_run(data)
    moved = autoscale_run({**data, "seeds": {"jitter": 3}})
    assert len(base.scale_events) and len(moved.scale_events)
    assert moved.requests.arrival_s.equals(base.requests.arrival_s)
    assert not moved.replicas.equals(base.replicas)


@pytest.mark.parametrize(("seeds", "key"), [
    ({"workload": "x"}, "seeds.workload"),
    ({"policy": 3}, "seeds.policy"),
    ({"sim": 1.5}, "seeds.sim"),
    ("7", "seeds"),
])
def test_simulation_key_bad_seeds_name_the_key(seeds, key):
    """001 §13: bad input fails at load, naming the key and what is valid."""
    with pytest.raises(ScenarioError) as err:
        scenario(seeds=seeds)
    assert err.value.path == key
