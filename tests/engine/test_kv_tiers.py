"""KV tiers below the GPU: link timing, targeted hash-keyed reload, what a hit costs on each
tier, thrashing, and the invariants under random pressure (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.kv_tiers import KVLinkConfig, KVTiersConfig
from blis_simpy.config.resolve import resolve
from blis_simpy.core.request import Request, State
from blis_simpy.core.tier_records import TierLog
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.checked import checked
from blis_simpy.engine.kv.tiered import TieredKVCache, pool_class
from blis_simpy.engine.kv.tiers import LFU, LRU, Link, LowerTier, PriorityAware
from blis_simpy.sim.build import build
from tests.conftest import trace_run_scenario, write_trace

BS = 4


def tiers(cpu: int, storage: int = 0, **changes) -> KVTiersConfig:
    link = KVLinkConfig(blocks_per_s=1000.0, base_latency_us=100)
    return KVTiersConfig(cpu_blocks=cpu, storage_blocks=storage, cpu_link=link,
                         storage_link=link, **changes)


class Clock:
    now = 0

    def __call__(self) -> int:
        return self.now


def pool(gpu: int, cpu: int, storage: int = 0, **changes) -> tuple[TieredKVCache, Clock]:
    clock = Clock()
    config = tiers(cpu, storage, **changes)
    kv = checked(pool_class(config))(gpu, BS, config, clock, TierLog(cpu, storage, 0))
    return kv, clock


def request(index: int, tokens: list[int]) -> Request:
    req = Request(index, 0, np.array(tokens), np.arange(1))
    req.hash_blocks(BS)
    return req


def serve(kv: TieredKVCache, req: Request) -> int:
    """Admit a request's whole prompt and complete it; returns the load time charged."""
    hit = kv.lookup(req, req.input_len)
    start = len(hit.blocks) * BS
    assert kv.admit(req, hit, start, req.input_len - start)
    kv.complete(req)
    return hit.load_us


# -- links --------------------------------------------------------------------------------------

def test_link_transfer_takes_base_latency_plus_blocks_over_bandwidth():
    link = Link(100, 1000.0)  # 1 ms a block
    assert link.duration(5) == 100 + 5000
    assert link.transfer(0, 5) == 5100


def test_two_concurrent_transfers_queue_on_one_link():
    link = Link(100, 1000.0)
    assert link.transfer(0, 5) == 5100
    assert link.transfer(0, 3) == 5100 + 100 + 3000  # waits for the first
    assert link.transfer(20_000, 1) == 20_000 + 1100  # an idle link starts at once


def test_blocks_per_s_derive_from_bandwidth_and_the_model_shape():
    """Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes x 16 tokens = 2 MiB a block;
    at 25 GB/s that is 11,920.9 blocks/s; with TP 2 each GPU moves half the heads."""
    from blis_simpy.config.catalog import bundled_model_config
    from blis_simpy.config.kv_tiers import block_bytes
    config = bundled_model_config("meta-llama/llama-3.1-8b-instruct")
    assert block_bytes(config, 1, 16) == 2 * 32 * 8 * 128 * 2 * 16
    assert block_bytes(config, 2, 16) == 2 * 32 * 4 * 128 * 2 * 16
    sc = resolve(trace_run_scenario(write_trace_stub(), engine={"kv_tiers": {"cpu_blocks": 10}}))
    assert sc.engine.kv_tiers.cpu_link.blocks_per_s == 25e9 / (2 * 32 * 8 * 128 * 2 * 16)


def write_trace_stub():
    import tempfile
    from pathlib import Path
    return write_trace(Path(tempfile.mkdtemp()) / "t.csv", [(0.0, [1, 2, 3], 1)])


# -- reload -------------------------------------------------------------------------------------

def test_a_block_evicted_from_the_gpu_is_reloaded_from_the_cpu_by_hash():
    kv, clock = pool(gpu=5, cpu=16)
    a = list(range(100, 116))  # 4 blocks
    assert serve(kv, request(0, a)) == 0
    serve(kv, request(1, list(range(200, 220))))  # 5 blocks: evicts every block of a
    assert kv.lookup(request(2, a), 16).blocks == [-1, -1, -1, -1]
    clock.now = 10_000
    again = request(2, [*a, 7])
    load = serve(kv, again)
    assert load == 100 + 4 * 1000  # 4 blocks over the CPU link
    assert again.progress == 0 and kv.log.cpu_hits == 4 and kv.log.reloads == 4


def test_reload_is_targeted_to_the_prefix_and_registers_on_the_gpu():
    """Only the blocks of this prefix are reloaded; a second request for the same prefix
    then hits them on the GPU (no second transfer)."""
    kv, _clock = pool(gpu=8, cpu=16)
    a, b = list(range(100, 108)), list(range(300, 332))
    serve(kv, request(0, a))
    serve(kv, request(1, b))  # 8 blocks: evicts a's 2 blocks
    first = request(2, [*a, 1])
    hit = kv.lookup(first, first.input_len)
    assert kv.admit(first, hit, 8, 1)
    assert kv.log.reloads == 2
    assert [kv.hash_of(blk) for blk in first.blocks[:2]] == first.hashes[:2]
    second = request(3, [*a, 2])
    assert kv.lookup(second, second.input_len).blocks == first.blocks[:2]


def test_reloads_in_one_step_are_charged_once_each_queued_behind_the_other():
    kv, clock = pool(gpu=8, cpu=16)
    a, b, c = list(range(100, 108)), list(range(200, 208)), list(range(300, 332))
    serve(kv, request(0, a))
    serve(kv, request(1, b))
    serve(kv, request(2, c))  # evicts a and b
    clock.now = 50_000
    loads = []
    for i, prompt in enumerate((a, b)):
        req = request(3 + i, [*prompt, 1])
        hit = kv.lookup(req, req.input_len)
        assert kv.admit(req, hit, 8, 1)
        loads.append(hit.load_us)
    assert loads == [2100, 2100]  # the step waits 4,200 µs: the second queued on the link


def test_mirror_keeps_one_cpu_copy_per_hash_and_the_gpu_block():
    kv, _ = pool(gpu=16, cpu=16)
    a = list(range(100, 116))
    serve(kv, request(0, a))
    serve(kv, request(1, [*a, 5]))  # a GPU hit: nothing new to store
    assert kv.cpu.used == 4 and kv.log.offloads == 4
    assert all(b >= 0 for b in kv.lookup(request(2, a), 16).blocks)  # still on the GPU


def test_threshold_offload_copies_only_blocks_evicted_above_the_threshold():
    kv, _ = pool(gpu=4, cpu=16, offload="threshold", threshold=1.0)
    serve(kv, request(0, list(range(100, 116))))
    serve(kv, request(1, list(range(200, 216))))  # evicted while 0 used: below 100 %
    assert kv.log.evictions == 4 and kv.cpu.used == 0
    kv, _ = pool(gpu=4, cpu=16, offload="threshold", threshold=0.0)
    serve(kv, request(0, list(range(100, 116))))
    serve(kv, request(1, list(range(200, 216))))
    assert kv.cpu.used == 4 and kv.lookup(request(2, list(range(100, 116))), 16).blocks == [-1] * 4


def test_a_full_cpu_tier_demotes_to_storage_and_reloads_from_there():
    kv, clock = pool(gpu=5, cpu=4, storage=16)
    a, b = list(range(100, 116)), list(range(200, 220))
    serve(kv, request(0, a))
    serve(kv, request(1, b))  # the CPU tier drops a's blocks into storage
    assert kv.cpu.used == 4 and kv.storage is not None and kv.storage.used == 5
    assert kv.lookup(request(2, a), 16).blocks == [-2] * 4
    clock.now = 10_000
    assert serve(kv, request(2, [*a, 1])) == 4100
    assert kv.log.storage_hits == 4


def test_fifo_eviction_ignores_reuse_and_lru_keeps_the_reused_block():
    for policy, kept in (("lru", True), ("fifo", False)):
        kv, _ = pool(gpu=2, cpu=3, eviction=policy)
        a, b, c = [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]
        serve(kv, request(0, a))
        serve(kv, request(1, b))
        serve(kv, request(2, c))  # GPU holds 2 blocks: a was evicted, reloaded below
        serve(kv, request(3, [*a, 0]))  # lru: a is now the most recent
        serve(kv, request(4, list(range(20, 24))))  # the full CPU tier drops one block
        assert (request(0, a).hashes[0] in kv.cpu) is kept, policy


def test_lazy_offload_copies_a_block_only_when_the_gpu_evicts_it():
    """Seed 001 §6 OffloadPolicy "lazy": nothing is copied while the GPU keeps a block (mirror
    copies at once); every cached block the GPU evicts is copied, whatever the GPU's use."""
    kv, _ = pool(gpu=4, cpu=16, offload="lazy")
    a = list(range(100, 116))
    serve(kv, request(0, a))
    assert kv.cpu.used == 0 and kv.log.offloads == 0
    serve(kv, request(1, list(range(200, 216))))  # evicts a's 4 blocks (GPU use 0 then)
    assert kv.log.evictions == 4 and kv.cpu.used == 4
    assert kv.lookup(request(2, a), 16).blocks == [-1] * 4


def test_lfu_eviction_drops_the_least_used_block_least_recent_among_equals():
    """Seed 001 §6 EvictionPolicy "lfu": a full tier drops the block used (stored or
    reloaded) the fewest times; among equals the least recently used. LRU drops another."""
    def fill(policy):
        tier = LowerTier(3, policy)
        for h in (1, 2, 3):
            tier.store(h)
        for h in (1, 1, 2, 3):  # uses: 1 -> 3, 2 -> 2, 3 -> 2; recency: 1, 2, 3
            tier.touch(h)
        return tier
    assert fill(LRU()).store(4) == 1
    lfu = fill(LFU())
    assert lfu.store(4) == 2  # 2 and 3 are used twice; 2 less recently
    assert lfu.store(5) == 4  # the newcomer, used once
    assert lfu.policy.tracks(lfu.entries) and set(lfu.entries) == {1, 3, 5}
    lfu.remove(5)
    lfu.clear()
    assert lfu.used == 0 and lfu.policy.tracks(lfu.entries)


def test_priority_eviction_drops_the_lowest_priority_block_least_recent_among_equals():
    """Seed 001 §6 EvictionPolicy "priority": a full tier drops the block whose last user had
    the lowest priority (higher = more urgent); among equals the least recently used; a
    reload by a request re-marks the block with its priority."""
    tier = LowerTier(3, PriorityAware())
    tier.store(1, 5.0)
    tier.store(2, 1.0)
    tier.store(3, 1.0)
    assert tier.store(4, 0.0) == 2 and tier.dropped_priority == 1.0
    tier.touch(3, 9.0)
    assert tier.store(5, 2.0) == 4
    assert tier.store(6, 2.0) == 5 and set(tier.entries) == {1, 3, 6}
    assert tier.policy.tracks(tier.entries)


def test_priority_eviction_keeps_a_high_priority_prefix_that_lru_would_drop():
    """Seed 001 §6: under lazy offload a block carries down the priority of the request that
    released it; a low-priority request's blocks then churn in the full CPU tier while the
    high-priority prefix stays (LRU drops the prefix, the oldest)."""
    a, b = list(range(100, 116)), list(range(200, 220))
    for eviction, kept in (("priority", True), ("lru", False)):
        kv, _ = pool(gpu=5, cpu=5, offload="lazy", eviction=eviction)
        first = request(0, a)
        first.priority = 5.0
        serve(kv, first)
        low = request(1, b)
        low.priority = 1.0
        serve(kv, low)  # evicts a's 4 blocks to the CPU tier
        serve(kv, request(2, list(range(300, 320))))  # evicts b's 5 blocks
        assert all((h in kv.cpu) is kept for h in first.hashes), eviction
        assert kv.cpu.used == 5


# -- against recomputation and the GPU, in a run ------------------------------------------------

def ttft_of_third(tmp_path, kv_blocks: int, cpu_blocks: int) -> int:
    prefix = list(range(50_000, 50_512))  # 32 blocks of 16
    rows = [(0.0, prefix + list(range(1000, 1020)), 2),
            (1.0, list(range(2000, 2950)), 2),  # fills a small GPU cache: the prefix goes
            (2.0, prefix + list(range(3000, 3020)), 2)]
    engine = {"kv_blocks": kv_blocks,
              "kv_tiers": {"cpu_blocks": cpu_blocks, "cpu_link": {"blocks_per_s": 20_000}}}
    sim = build(resolve(trace_run_scenario(write_trace(tmp_path / "t.csv", rows),
                                           engine=engine)), checks=True)
    sim.run()
    third = sim.recorder.requests[2]
    return third.first_token_at - third.arrival


def test_a_cpu_hit_costs_more_than_a_gpu_hit_and_less_than_recomputation(tmp_path):
    gpu_hit = ttft_of_third(tmp_path, 2000, 0)
    cpu_hit = ttft_of_third(tmp_path, 60, 1000)
    recompute = ttft_of_third(tmp_path, 60, 0)
    assert gpu_hit < cpu_hit < recompute
    assert cpu_hit - gpu_hit == 32 * 50  # 32 blocks at 20,000 blocks/s


def test_no_cpu_tier_keeps_the_plain_cache_and_the_same_results(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [(0.1 * i, list(range(i, i + 300)), 20)
                                             for i in range(30)])
    plain = build(resolve(trace_run_scenario(trace, engine={"kv_blocks": 100})))
    zero = build(resolve(trace_run_scenario(trace, engine={"kv_blocks": 100,
                                                           "kv_tiers": {"cpu_blocks": 0}})))
    assert type(next(iter(zero.fleet)).kv) is KVCache
    a, b = (blis_simpy.run(trace_run_scenario(trace, engine=e)).summary for e in
            ({"kv_blocks": 100}, {"kv_blocks": 100, "kv_tiers": {"cpu_blocks": 0}}))
    assert a == b and "kv_tiers" not in a
    del plain


# -- thrashing ----------------------------------------------------------------------------------

def ping_pong(tmp_path, kv_blocks: int):
    """Two prompts of 40 blocks taking turns every 50 ms."""
    one, two = list(range(10_000, 10_640)), list(range(20_000, 20_640))
    rows = [(0.05 * i, (one if i % 2 == 0 else two) + [i], 1) for i in range(60)]
    engine = {"kv_blocks": kv_blocks, "kv_tiers": {"cpu_blocks": 1000}}
    return blis_simpy.run(trace_run_scenario(write_trace(tmp_path / "t.csv", rows),
                                             engine=engine))


def test_thrashing_triggers_on_a_ping_pong_working_set(tmp_path):
    res = ping_pong(tmp_path, 60)  # room for one prompt, not two
    tiers = res.summary["kv_tiers"]
    assert tiers["thrashes"] > 0 and tiers["thrashing_rate"] > 0.5
    assert res.metrics["anomalies"].get("kv_thrashing", 0) >= 1


def test_thrashing_stays_silent_on_a_working_set_that_fits(tmp_path):
    res = ping_pong(tmp_path, 400)
    tiers = res.summary["kv_tiers"]
    assert tiers["thrashes"] == 0 and tiers["reloaded_blocks"] == 0
    assert "kv_thrashing" not in res.metrics["anomalies"]


# -- invariants under random pressure -----------------------------------------------------------

prompts = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 60)), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts, st.integers(4, 12), st.integers(1, 12), st.integers(0, 8),
       st.sampled_from(["mirror", "threshold", "lazy"]),
       st.sampled_from(["lru", "fifo", "lfu", "priority"]))
def test_invariants_hold_under_random_pressure(ops, gpu, cpu, storage, offload, eviction):
    """Every operation is followed by the pool's checks (used + free = total on the GPU and on
    every lower tier; one lower-tier copy per hash). Every admitted prefix is exactly the
    request's own content (no token of it is prefilled again), and every load is bounded."""
    kv, clock = pool(gpu=gpu, cpu=cpu, storage=storage if cpu else 0, offload=offload,
                     threshold=0.5, eviction=eviction)
    running: list[Request] = []
    for i, (family, length) in enumerate(ops):
        clock.now += 1000
        req = request(i, [family * 1000 + t for t in range(length)])
        req.priority = float(length % 4)  # what priority eviction reads
        hit = kv.lookup(req, req.input_len)
        start = len(hit.blocks) * BS
        while not kv.admit(req, hit, start, req.input_len - start):
            if not running:
                break
            kv.release(running.pop(0))
            hit = kv.lookup(req, req.input_len)
            start = len(hit.blocks) * BS
        else:
            cached = start // BS
            assert [kv.hash_of(b) for b in req.blocks[:cached]] == req.hashes[:cached]
            assert len(set(req.blocks)) == len(req.blocks)
            assert 0 <= hit.load_us <= 2 * (100 + 1000 * cached)
            running.append(req)
            if i % 3 == 0:
                kv.complete(running.pop(0))
    for req in running:
        kv.complete(req)
    assert kv.used == 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(20, 400), st.integers(1, 30)),
                min_size=2, max_size=20),
       st.integers(30, 80), st.sampled_from(["mirror", "threshold", "lazy"]),
       st.sampled_from(["lru", "lfu", "priority"]))
def test_runs_with_tiers_finish_every_request_with_checks_on(tmp_path_factory, rows, gpu,
                                                            offload, eviction):
    """Heavy KV pressure, preemptions and reloads in a whole run: nothing deadlocks (every
    request completes) and the checks run after every block operation."""
    trace = [(0.01 * i, [family * 100_000 + t for t in range(n)], out)
             for i, (family, n, out) in enumerate(rows)]
    path = write_trace(tmp_path_factory.mktemp("t") / "t.csv", trace)
    engine = {"kv_blocks": gpu, "kv_tiers": {"cpu_blocks": 50, "storage_blocks": 50,
                                             "offload": offload, "threshold": 0.5,
                                             "eviction": eviction}}
    sim = build(resolve(trace_run_scenario(path, engine=engine)), checks=True)
    sim.run()
    assert all(r.state is State.COMPLETED for r in sim.recorder.requests)


def test_snapshots_show_the_cpu_tier_use(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [(0.1 * i, list(range(i * 1000, i * 1000 + 300)), 5)
                                             for i in range(10)])
    sim = build(resolve(trace_run_scenario(trace, engine={"kv_blocks": 100,
                                                          "kv_tiers": {"cpu_blocks": 400}})))
    sim.run()
    instance = next(iter(sim.fleet))
    snapshot = sim.gateway.snapshots.snapshot(instance, sim.env.now)
    assert snapshot.kv_cpu_utilization == instance.kv.cpu.used / 400 > 0
