"""Admission templates called directly: each assertion pins the template's own rule."""

from __future__ import annotations

import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.router_state import RouterState
from blis_simpy.policies.admission import TokenBucketParams
from tests.policies.helpers import admission, view

MS = 1_000  # µs


def decide(policy, clock: int, tokens: int = 10, tenant: str = "", state=None):
    return policy.decide(view(input_tokens=tokens, tenant=tenant), state or RouterState(), clock)


# -- always-admit / reject-all ----------------------------------------------------------------

def test_always_admit_admits_everything_with_empty_reason():
    policy = admission("always-admit")
    state = RouterState()
    for clock, tokens in [(0, 1), (0, 10**6), (5 * 10**9, 7)]:
        decision = policy.decide(view(input_tokens=tokens, tenant="t"), state, clock)
        assert (decision.action, decision.reason, decision.delay_us) == ("admit", "", 0)


def test_reject_all_rejects_everything_with_its_name_as_reason():
    policy = admission("reject-all")
    for clock, tokens in [(0, 1), (10**9, 0)]:
        decision = decide(policy, clock, tokens)
        assert (decision.action, decision.reason) == ("reject", "reject-all")


# -- token-bucket ---------------------------------------------------------------------------

def test_token_bucket_defaults_are_the_references():
    assert TokenBucketParams() == TokenBucketParams(10_000.0, 1_000.0, "tokens", False)
    policy = admission("token-bucket")
    assert decide(policy, 0, 10_000).action == "admit"  # starts full: the whole capacity
    assert decide(policy, 0, 1).action == "reject"


def test_token_bucket_starts_full_and_deducts_the_input_tokens():
    policy = admission("token-bucket", capacity=100, refill_per_s=0)
    assert decide(policy, 0, 60).action == "admit"
    assert decide(policy, 0, 40).action == "admit"  # 100 - 60 = 40 left: exactly enough
    rejected = decide(policy, 0, 1)
    assert (rejected.action, rejected.reason) == ("reject", "insufficient tokens")


def test_token_bucket_refills_at_one_token_per_ms_at_1000_per_s():
    policy = admission("token-bucket", capacity=100, refill_per_s=1000)
    assert decide(policy, 0, 100).action == "admit"  # empty now
    assert decide(policy, 5 * MS, 6).action == "reject"  # 5 ms -> 5 tokens
    assert decide(policy, 5 * MS, 5).action == "admit"  # the rejection consumed nothing
    assert decide(policy, 5 * MS, 1).action == "reject"  # no refill without elapsed time
    assert decide(policy, 6 * MS, 1).action == "admit"  # one more ms, one more token
    assert decide(policy, 6 * MS + 500, 1).action == "reject"  # half a token is not enough
    assert decide(policy, 7 * MS, 1).action == "admit"  # the half carried over


def test_token_bucket_refill_rate_parameter_scales_the_refill():
    policy = admission("token-bucket", capacity=100, refill_per_s=4000)
    assert decide(policy, 0, 100).action == "admit"
    assert decide(policy, 10 * MS, 41).action == "reject"  # 10 ms at 4/ms = 40
    assert decide(policy, 10 * MS, 40).action == "admit"


def test_token_bucket_never_holds_more_than_its_capacity():
    policy = admission("token-bucket", capacity=100, refill_per_s=1000)
    assert decide(policy, 0, 50).action == "admit"
    # 10 s of refill would be 10000 tokens; the bucket stops at 100.
    assert decide(policy, 10_000 * MS, 100).action == "admit"
    assert decide(policy, 10_000 * MS, 1).action == "reject"


def test_token_bucket_rejection_does_not_consume():
    policy = admission("token-bucket", capacity=100, refill_per_s=0)
    for _ in range(5):
        assert decide(policy, 0, 101).reason == "insufficient tokens"
    assert decide(policy, 0, 100).action == "admit"


def test_token_bucket_cost_above_capacity_is_never_admitted():
    policy = admission("token-bucket", capacity=50, refill_per_s=1000)
    for clock in (0, 10**6, 10**9, 10**12):
        decision = decide(policy, clock, 51)
        assert (decision.action, decision.reason) == ("reject", "insufficient tokens")


def test_token_bucket_cost_requests_charges_one_per_request():
    policy = admission("token-bucket", capacity=2, refill_per_s=0, cost="requests")
    assert decide(policy, 0, 5000).action == "admit"  # far above capacity in tokens
    assert decide(policy, 0, 5000).action == "admit"
    assert decide(policy, 0, 1).action == "reject"


def test_token_bucket_per_tenant_buckets_are_independent():
    policy = admission("token-bucket", capacity=10, refill_per_s=0, per_tenant=True)
    assert decide(policy, 0, 10, tenant="a").action == "admit"
    assert decide(policy, 0, 1, tenant="a").action == "reject"
    assert decide(policy, 0, 10, tenant="b").action == "admit"  # b has its own full bucket
    assert decide(policy, 0, 1, tenant="b").action == "reject"


def test_token_bucket_shared_bucket_by_default():
    policy = admission("token-bucket", capacity=10, refill_per_s=0)
    assert decide(policy, 0, 10, tenant="a").action == "admit"
    assert decide(policy, 0, 1, tenant="b").action == "reject"


def test_token_bucket_late_first_tenant_bucket_starts_full_not_overfull():
    policy = admission("token-bucket", capacity=10, refill_per_s=1000, per_tenant=True)
    assert decide(policy, 10**6, 10, tenant="late").action == "admit"
    assert decide(policy, 10**6, 1, tenant="late").action == "reject"


def test_token_bucket_bad_params_name_their_path():
    with pytest.raises(ScenarioError) as err:
        admission("token-bucket", capacity=-1)
    assert err.value.path == "policies.admission.params.capacity"
    with pytest.raises(ScenarioError) as err:
        admission("token-bucket", cost="bytes")
    assert err.value.path == "policies.admission.params.cost"


# -- rate-limit -----------------------------------------------------------------------------

def test_rate_limit_sliding_window_rejects_over_the_limit():
    policy = admission("rate-limit", max_requests=2, window_s=1.0)
    assert decide(policy, 0).action == "admit"
    assert decide(policy, 100 * MS).action == "admit"
    rejected = decide(policy, 500 * MS)
    assert (rejected.action, rejected.reason, rejected.delay_us) == ("reject", "rate limit", 0)
    # At exactly 1 s the admission at 0 has left the window (it covers (clock - 1 s, clock]).
    assert decide(policy, 1_000 * MS).action == "admit"
    assert decide(policy, 1_050 * MS).action == "reject"  # 0.1 s and 1.0 s still inside
    assert decide(policy, 1_100 * MS).action == "admit"  # 0.1 s has left


def test_rate_limit_rejections_do_not_occupy_the_window():
    policy = admission("rate-limit", max_requests=1, window_s=1.0)
    assert decide(policy, 0).action == "admit"
    for t in (200, 400, 999):
        assert decide(policy, t * MS).action == "reject"
    assert decide(policy, 1_000 * MS).action == "admit"  # only the admission at 0 counted


def test_rate_limit_delay_gives_the_exact_wait_until_the_window_has_room():
    policy = admission("rate-limit", max_requests=1, window_s=1.0, on_limit="delay")
    assert decide(policy, 200 * MS).action == "admit"
    delayed = decide(policy, 500 * MS)
    assert (delayed.action, delayed.reason) == ("delay", "rate limit")
    assert delayed.delay_us == 200_000 + 1_000_000 - 500_000
    assert decide(policy, 500 * MS + delayed.delay_us).action == "admit"


def test_rate_limit_delay_is_measured_from_the_oldest_admission_in_the_window():
    policy = admission("rate-limit", max_requests=2, window_s=0.5, on_limit="delay")
    assert decide(policy, 0).action == "admit"
    assert decide(policy, 300 * MS).action == "admit"
    assert decide(policy, 400 * MS).delay_us == 100 * MS  # 0 + 0.5 s - 0.4 s


def test_rate_limit_per_tenant_limits_are_independent():
    policy = admission("rate-limit", max_requests=1, window_s=1.0, per_tenant=True)
    assert decide(policy, 0, tenant="a").action == "admit"
    assert decide(policy, 0, tenant="a").action == "reject"
    assert decide(policy, 0, tenant="b").action == "admit"
    shared = admission("rate-limit", max_requests=1, window_s=1.0)
    assert decide(shared, 0, tenant="a").action == "admit"
    assert decide(shared, 0, tenant="b").action == "reject"


def test_rate_limit_requires_max_requests():
    with pytest.raises(ScenarioError) as err:
        admission("rate-limit")
    assert err.value.path == "policies.admission.params.max_requests"
    with pytest.raises(ScenarioError) as err:
        admission("rate-limit", max_requests=1, on_limit="queue")
    assert err.value.path == "policies.admission.params.on_limit"


# -- tenant-quota ---------------------------------------------------------------------------

def active(**tenants: int) -> RouterState:
    """A router state whose tenants have these active-request counts, built through the
    gateway's own updates."""
    state = RouterState()
    for tenant, count in tenants.items():
        for _ in range(count):
            state.on_arrival(tenant, 0)
            state.on_admit(tenant)
    return state


def test_tenant_quota_rejects_at_the_quota_of_active_requests():
    policy = admission("tenant-quota", quotas={"a": 2})
    assert decide(policy, 0, tenant="a", state=active(a=1)).action == "admit"
    rejected = decide(policy, 0, tenant="a", state=active(a=2))
    assert (rejected.action, rejected.reason) == ("reject", "tenant 'a' quota 2")


def test_tenant_quota_counts_active_not_total_requests():
    state = active(a=2)
    state.on_finish("a")  # one finished: 1 active of 2 seen
    assert state.tenant("a").request_count == 2
    policy = admission("tenant-quota", quotas={"a": 2})
    assert decide(policy, 0, tenant="a", state=state).action == "admit"


def test_tenant_quota_unlisted_tenants_are_unlimited_by_default():
    policy = admission("tenant-quota", quotas={"a": 0})
    assert decide(policy, 0, tenant="b", state=active(b=1000)).action == "admit"
    assert decide(policy, 0, tenant="a", state=active()).action == "reject"  # quota 0


def test_tenant_quota_default_quota_applies_to_unlisted_tenants():
    policy = admission("tenant-quota", quotas={"a": 5}, default_quota=1)
    assert decide(policy, 0, tenant="b", state=active(b=0)).action == "admit"
    assert decide(policy, 0, tenant="b", state=active(b=1)).reason == "tenant 'b' quota 1"
    assert decide(policy, 0, tenant="a", state=active(a=4)).action == "admit"  # listed: 5
    zero = admission("tenant-quota", default_quota=0)
    assert decide(zero, 0, tenant="c", state=active()).action == "reject"


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_tenant_quota_bad_quota_is_a_scenario_error_at_its_path(bad):
    with pytest.raises(ScenarioError) as err:
        admission("tenant-quota", quotas={"gold": bad})
    assert err.value.path == "policies.admission.params.quotas.gold"


def test_tenant_quota_bad_default_quota_names_its_path():
    with pytest.raises(ScenarioError) as err:
        admission("tenant-quota", default_quota=-1)
    assert err.value.path == "policies.admission.params.default_quota"
