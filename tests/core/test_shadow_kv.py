"""The router's shadow KV model on hand-built routing histories."""

from __future__ import annotations

import random
from collections import OrderedDict

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


def test_runs_keep_the_order_a_per_hash_lru_keeps_under_random_histories():
    """The model: the OrderedDict the shadow KV used before (each hash moved to the end in
    turn, the oldest evicted beyond the capacity). Prompts share chains (a system prompt, a
    conversation that grows), come as tuples or lists, and may repeat a hash."""
    rng = random.Random(11)
    for capacity in (1, 2, 3, 5, 8, 13, 40):
        shadow, model = ShadowKV(capacity), OrderedDict[int, None]()
        chains = [tuple(range(base, base + 12)) for base in (100, 200, 300)]
        for _ in range(400):
            chain = rng.choice(chains)
            prompt: list[int] = list(chain[: rng.randint(0, len(chain))])
            prompt += [rng.randint(1, 60) for _ in range(rng.randint(0, 6))]
            if rng.random() < 0.3:
                chains.append(tuple(prompt))  # a later turn continues this one
            hashes = tuple(prompt) if rng.random() < 0.7 else prompt
            query = (*prompt[: rng.randint(0, len(prompt))], rng.randint(1, 400))
            assert shadow.expected_hit("i", query) == model_hit(model, query)
            assert shadow.expected_hit("i", hashes) == model_hit(model, hashes)
            shadow.routed("i", hashes)
            for h in hashes:
                if h in model:
                    model.move_to_end(h)
                else:
                    model[h] = None
                    if len(model) > capacity:
                        model.popitem(last=False)
            assert list(shadow.sets["i"]) == list(model)


def model_hit(model: OrderedDict[int, None], hashes) -> int:
    count = 0
    for h in hashes:
        if h not in model:
            break
        count += 1
    return count
