"""engine.kv_tiers: validation, link resolution, and a resolved scenario that is unchanged while
the tiers are off."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.conftest import BASE, merge


def scenario(**tiers) -> Scenario:
    return Scenario.from_dict(merge(BASE, {"engine": {"kv_tiers": tiers}}))


def test_tiers_off_leave_the_resolved_scenario_as_before():
    plain = resolve(Scenario.from_dict(BASE)).to_dict()
    assert "kv_tiers" not in plain["engine"]
    assert resolve(scenario(cpu_blocks=0, offload="threshold")).to_dict()["engine"].get(
        "kv_tiers", {}).get("offload") == "threshold"  # a non-default value is written


def test_resolve_writes_the_links_blocks_per_second():
    tiers = resolve(scenario(cpu_blocks=10, storage_blocks=5)).engine.kv_tiers
    block = 2 * 32 * 8 * 128 * 2 * 16  # Llama-3.1-8B, 16-token blocks, one GPU
    assert tiers.cpu_link.blocks_per_s == 25e9 / block
    assert tiers.storage_link.blocks_per_s == 5e9 / block


@pytest.mark.parametrize("tiers, path", [
    ({"cpu_blocks": -1}, "engine.kv_tiers.cpu_blocks"),
    ({"cpu_blocks": 0, "storage_blocks": 5}, "engine.kv_tiers.storage_blocks"),
    ({"cpu_blocks": 5, "threshold": 1.5}, "engine.kv_tiers.threshold"),
    ({"cpu_blocks": 5, "offload": "eager"}, "engine.kv_tiers.offload"),
    ({"cpu_blocks": 5, "eviction": "mru"}, "engine.kv_tiers.eviction"),
    ({"cpu_blocks": 5, "cpu_link": {"blocks_per_s": 0}}, "engine.kv_tiers.cpu_link.blocks_per_s"),
    ({"cpu_blocks": 5, "thrash_anomaly_count": 1}, "engine.kv_tiers.thrash_anomaly_count"),
])
def test_bad_tier_settings_name_the_field(tiers, path):
    with pytest.raises(ScenarioError) as err:
        scenario(**tiers)
    assert err.value.path == path


def test_tiers_are_refused_in_compat_mode():
    data = merge(BASE, {"compat": "blis", "engine": {"kv_tiers": {"cpu_blocks": 5}},
                        "workload": {"arrival": "constant"}})
    with pytest.raises(ScenarioError, match="native only"):
        Scenario.from_dict(data)


def test_a_model_without_a_config_needs_blocks_per_s():
    data = merge(BASE, {"model": {"name": "ibm-granite/granite-3.1-8b-instruct"},
                        "engine": {"kv_tiers": {"cpu_blocks": 5}}})
    with pytest.raises(ScenarioError) as err:
        resolve(Scenario.from_dict(data))
    assert err.value.path == "engine.kv_tiers.cpu_link.blocks_per_s"


values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**8), st.floats(allow_nan=True),
                   st.text(max_size=5), st.lists(st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["cpu_blocks", "storage_blocks", "offload", "threshold",
                                        "eviction", "thrash_window_s", "thrash_anomaly_count",
                                        "cpu_link", "bogus"]), values, max_size=4))
def test_fuzzed_tier_sections_load_or_fail_with_a_scenario_error(tiers):
    try:
        resolve(scenario(**tiers))
    except ScenarioError as exc:
        assert exc.path.startswith("engine.kv_tiers")
