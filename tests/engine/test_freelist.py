"""The free list keeps vLLM's eviction order with a counter, a deque and lazy deletion."""

import random

from blis_simpy.engine.kv import freelist
from blis_simpy.engine.kv.freelist import FreeList


def test_never_used_blocks_come_first_then_released_ones_oldest_first():
    free = FreeList(4)
    assert free.take(3) == [0, 1, 2]
    free.extend([2, 0])
    free.push(1)
    assert list(free) == [3, 2, 0, 1] and len(free) == 4
    assert free.take_one() == 3
    assert free.take(2) == [2, 0]


def test_a_revived_block_is_skipped_and_a_later_release_puts_it_at_the_tail():
    free = FreeList(3)
    free.take(3)
    free.extend([0, 1, 2])
    free.remove(1)  # a prefix hit revives block 1
    free.push(1)  # and releases it again: it is now the newest
    assert list(free) == [0, 2, 1] and len(free) == 3
    assert free.take(3) == [0, 2, 1]
    assert not any(free.stale) and free.stale_count == 0


def test_matches_an_ordered_dict_under_random_operations(monkeypatch):
    """The model: the OrderedDict the pool used before, with compaction forced often."""
    from collections import OrderedDict

    monkeypatch.setattr(freelist, "COMPACT_AT", 3)
    rng = random.Random(7)
    total = 40
    free, model = FreeList(total), OrderedDict.fromkeys(range(total))
    held: list[int] = []
    for _ in range(5000):
        op = rng.random()
        if op < 0.35 and model:
            count = rng.randint(1, min(4, len(model)))
            expected = [model.popitem(last=False)[0] for _ in range(count)]
            assert free.take(count) == expected
            held.extend(expected)
        elif op < 0.5 and model:
            assert free.take_one() == model.popitem(last=False)[0]
        elif op < 0.8 and held:
            block = held.pop(rng.randrange(len(held)))
            free.push(block)
            model[block] = None
        else:
            released = [b for b in model if b < free.fresh]
            if released:
                revived = rng.sample(released, rng.randint(1, min(3, len(released))))
                if len(revived) == 1:
                    free.remove(revived[0])
                else:
                    free.remove_all(revived)
                for block in revived:
                    del model[block]
                held.extend(revived)
        assert len(free) == len(model)
    assert list(free) == list(model)
