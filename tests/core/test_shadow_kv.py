"""The router's shadow KV model on hand-built routing histories."""

from __future__ import annotations

import pytest

from blis_simpy.core.shadow_kv import ShadowKV


def test_expected_hit_counts_leading_blocks_routed_to_that_instance_only():
    shadow = ShadowKV()
    shadow.routed("instance_1", (11, 12, 13))
    assert shadow.expected_hit("instance_1", (11, 12, 13, 14)) == 3
    assert shadow.expected_hit("instance_1", (11, 99, 13)) == 1  # stops at the first gap
    assert shadow.expected_hit("instance_0", (11, 12)) == 0
    assert shadow.expected_hit("instance_9", ()) == 0


def test_lru_eviction_estimate_drops_the_least_recently_routed_block():
    shadow = ShadowKV(capacity=2)
    shadow.routed("instance_0", (1, 2, 3))  # 1 is predicted evicted
    assert shadow.expected_hit("instance_0", (1, 2, 3)) == 0
    assert shadow.expected_hit("instance_0", (2, 3)) == 2
    shadow.routed("instance_0", (2,))  # touch 2: 3 is now the oldest
    shadow.routed("instance_0", (4,))
    assert shadow.expected_hit("instance_0", (2,)) == 1
    assert shadow.expected_hit("instance_0", (3,)) == 0


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        ShadowKV(0)
