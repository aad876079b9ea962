"""`convert blis-command` with the reference's tiered-KV flags: native KV tiers, native mode,
and a header saying what differs from the reference's tiers."""

from __future__ import annotations

from blis_simpy.compat.convert import blis_command, to_yaml
from blis_simpy.config.scenario import Scenario
from tests.compat.test_convert import BASE


def test_kv_cpu_blocks_become_a_mirrored_cpu_tier_in_native_mode():
    data = blis_command(["run", *BASE, "--kv-cpu-blocks", "5000",
                         "--kv-transfer-bandwidth", "4", "--kv-transfer-base-latency", "10"])
    assert data["compat"] == "none"
    assert data["engine"]["kv_tiers"] == {
        "cpu_blocks": 5000, "offload": "mirror",
        # 16-token blocks at 4 tokens/µs: 4 µs a block, as the reference charges
        "cpu_link": {"blocks_per_s": 250_000.0, "base_latency_us": 10}}
    text = to_yaml(data)
    assert "native mode (compat: none)" in text and "compat: blis reproduces" not in text
    assert Scenario.from_yaml_text(text).engine.kv_tiers.cpu_blocks == 5000


def test_an_explicit_offload_threshold_selects_threshold_offload():
    data = blis_command(["run", *BASE, "--kv-cpu-blocks", "10", "--kv-offload-threshold", "0.5"])
    tiers = data["engine"]["kv_tiers"]
    assert tiers["offload"] == "threshold" and tiers["threshold"] == 0.5


def test_no_cpu_blocks_keeps_the_compat_scenario():
    plain = blis_command(["run", *BASE])
    assert blis_command(["run", *BASE, "--kv-cpu-blocks", "0",
                         "--kv-transfer-bandwidth", "5"]) == plain
    assert plain["compat"] == "blis" and "kv_tiers" not in plain["engine"]
