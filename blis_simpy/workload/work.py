"""The work a scenario asks for, estimated after every multiplier and bounded before the run.

A few bytes of YAML can ask for more than any machine holds: a burst every microsecond, a
million turns per chat session, a rate or prompt multiplied by a billion, a load profile that
multiplies the rate, reasoning chains of ten million steps. Each multiplies work after the
plain `rate_per_s x duration_s` count, so each is counted here, from the configured means:

* requests: arrivals (open-loop rate x rate share x the load profile's mean multiplier over
  the window x an abusive tenant's rate multiplier, plus bursts), times the requests each
  arrival starts (chat turns, agentic steps), at most `max_requests`;
* tokens of one request (prompt x prompt multiplier, a chat's carried history, an agentic
  context, reasoning chain x tokens per step, output x output multiplier): what its token ids
  take in memory;
* tokens in all, the memory and time the requests' token ids and steps cost;
* periodic events: autoscaler polls over the run (a poll every microsecond of a day is 86
  billion events), and random crashes (`faults.random_crashes`: one per instance per mean
  time between failures).

Any over its limit (core/units.py) is refused before the run, naming the field that took it
over and the whole product. Closed-loop users are not counted: each waits for its response,
so their requests are bounded by what the cluster serves, not by the scenario.
"""

from __future__ import annotations

import math

import numpy as np

from blis_simpy.config.distributions import Distribution, mean_of
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import (
    ChatConfig,
    DistributionWorkload,
    TenantSpec,
    TenantsWorkload,
    Workload,
)
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import MAX_POLLS, MAX_REQUESTS, MAX_TOKENS, MAX_TOTAL_TOKENS
from blis_simpy.workload.sampling import token_bounds


# Plain classes, not dataclasses: every run builds this check, and making a dataclass costs
# ~0.6 ms of start-up (docs/performance.md: Start-up).
class Factor:
    """One number a count is the product of, and the field it comes from."""

    __slots__ = ("label", "path", "value")

    def __init__(self, path: str, value: float, label: str) -> None:
        self.path, self.value, self.label = path, value, label

    def __str__(self) -> str:
        return f"{self.label} {self.value:,.4g}"


class Source:
    """Requests of one kind: `arrivals` (a product of factors) times `per_arrival` requests
    each, `tokens_per_arrival` over all of them; the largest one about `largest` tokens,
    its size set mainly by the field `largest_path` (`largest_why` says how)."""

    __slots__ = ("arrivals", "largest", "largest_path", "largest_why", "per_arrival",
                 "tokens_per_arrival", "what")

    def __init__(self, what: str, arrivals: list[Factor], per_arrival: Factor,
                 tokens_per_arrival: float, largest: float, largest_path: str,
                 largest_why: str) -> None:
        self.what, self.arrivals, self.per_arrival = what, arrivals, per_arrival
        self.tokens_per_arrival, self.largest = tokens_per_arrival, largest
        self.largest_path, self.largest_why = largest_path, largest_why

    @property
    def factors(self) -> list[Factor]:
        return [*self.arrivals, self.per_arrival]

    @property
    def requests(self) -> float:
        return math.prod(f.value for f in self.factors)

    @property
    def tokens(self) -> float:
        return math.prod(f.value for f in self.arrivals) * self.tokens_per_arrival


def check_work(scenario: Scenario) -> None:
    """Raise a ScenarioError if the scenario implies more work than the limits allow."""
    workload = scenario.workload
    sources = sources_of(workload)
    cap = getattr(workload, "max_requests", None)
    for source in sources:
        if source.largest > MAX_TOKENS:
            raise ScenarioError(source.largest_path, f"{source.what}: one request would be "
                                f"about {source.largest:,.0f} tokens ({source.largest_why}); "
                                f"the limit is {MAX_TOKENS:,}",
                                "smaller lengths or multipliers")
    requests = sum(s.requests for s in sources)
    share = 1.0 if cap is None or requests <= cap else cap / requests
    if requests * share > MAX_REQUESTS:
        raise too_much(sources, "requests", requests, MAX_REQUESTS,
                       "a lower rate, fewer or longer-spaced arrivals, or max_requests")
    tokens = sum(s.tokens for s in sources) * share
    if tokens > MAX_TOTAL_TOKENS:
        raise too_much(sources, "tokens", tokens, MAX_TOTAL_TOKENS,
                       "fewer requests, shorter prompts or outputs, or max_requests")
    check_polls(scenario)
    check_crashes(scenario)


def too_much(sources: list[Source], unit: str, total: float, limit: int, valid: str
             ) -> ScenarioError:
    """The error for a total over its limit, naming the field of the largest source whose
    running product first passes the limit (or its last factor)."""
    worst = max(sources, key=lambda s: s.requests if unit == "requests" else s.tokens)
    factors = worst.factors if unit == "requests" else [
        *worst.arrivals, Factor(worst.per_arrival.path, worst.tokens_per_arrival,
                                "tokens per arrival")]
    product, named = 1.0, factors[-1]
    for factor in factors:
        product *= factor.value
        if product > limit:
            named = factor
            break
    return ScenarioError(named.path, f"the workload implies about {total:,.0f} {unit}; the "
                         f"limit is {limit:,} ({worst.what}: "
                         f"{' x '.join(str(f) for f in factors)})", valid)


def sources_of(workload: Workload) -> list[Source]:
    if isinstance(workload, DistributionWorkload):
        prompt = workload.prefix_tokens + workload.prompt.mean
        tokens = prompt + workload.output.mean
        return [Source("the workload", [Factor("workload.num_requests", workload.num_requests,
                                               "num_requests")],
                       Factor("workload.num_requests", 1, "requests each"), tokens, tokens,
                       "workload.prompt", f"prefix_tokens + prompt and output means "
                       f"{tokens:,.4g}")]
    if isinstance(workload, TenantsWorkload):
        return [s for i, t in enumerate(workload.tenants) for s in tenant_sources(workload, i, t)]
    return []  # a trace: its rows are counted as it is read (workload/trace_file.py)


def tenant_sources(workload: TenantsWorkload, i: int, tenant: TenantSpec) -> list[Source]:
    """A tenant's open-loop arrivals and bursts (closed-loop users are not counted: they
    wait for their responses)."""
    where = f"workload.tenants[{i}]"
    behavior = tenant.behavior
    window = Factor("workload.duration_s", workload.duration_s, "duration_s")
    sources = []
    if tenant.closed_loop is None and tenant.rate_fraction > 0:
        arrivals = [window, Factor("workload.rate_per_s", workload.rate_per_s, "rate_per_s"),
                    Factor(f"{where}.rate_fraction", tenant.rate_fraction
                           / workload.open_fraction_total, "rate share")]
        if workload.load_profile is not None:
            arrivals.append(Factor("workload.load_profile", profile_mean(workload),
                                   "load profile mean multiplier"))
        if behavior.type == "abusive":
            arrivals.append(Factor(f"{where}.behavior.rate_multiplier",
                                   behavior.rate_multiplier, "rate_multiplier"))
        sources.append(per_arrival(workload, tenant, where, f"tenant {tenant.id!r}",
                                   arrivals))
    if behavior.type in ("bursty", "adversarial"):
        bursts = [Factor(f"{where}.behavior.burst_every_s",
                         workload.duration_s / behavior.burst_every_s, "bursts"),
                  Factor(f"{where}.behavior.burst_size", count(behavior.burst_size),
                         "burst_size")]
        sources.append(per_arrival(workload, tenant, where, f"tenant {tenant.id!r} bursts",
                                   bursts))
    return sources


def per_arrival(workload: TenantsWorkload, tenant: TenantSpec, where: str, what: str,
                arrivals: list[Factor]) -> Source:
    """What one arrival of `tenant` starts: its requests, their tokens, the largest one."""
    abusive = tenant.behavior.type == "abusive"
    shapes = [shape for shape, _ in workload.shapes(tenant)]  # the longest archetype's
    message = max(count(s.prompt) for s in shapes) * (
        tenant.behavior.prompt_multiplier if abusive else 1)
    answer = max(count(s.output) for s in shapes) * (
        tenant.behavior.output_multiplier if abusive else 1)
    prefix = prefix_tokens(workload, tenant)
    kind = tenant.request_type
    base = prefix + message + answer
    largest_path = (f"{where}.behavior.prompt_multiplier" if abusive and message >= answer
                    else f"{where}.behavior.output_multiplier" if abusive else f"{where}.prompt")
    if kind == "reasoning":
        chain = count(tenant.reasoning.chain_length) * count(tenant.reasoning.tokens_per_step)
        tokens = base + chain
        path = f"{where}.reasoning.chain_length" if chain >= base else largest_path
        return Source(what, arrivals, Factor(f"{where}.reasoning", 1, "requests each"),
                      tokens, tokens, path, f"prompt, output and a reasoning chain of "
                      f"{chain:,.4g} tokens")
    if kind == "chat":
        return chat_source(tenant, where, what, arrivals, prefix, message, answer)
    if kind == "agentic":
        return agentic_source(tenant, where, what, arrivals, prefix, message, answer)
    return Source(what, arrivals, Factor(where, 1, "requests each"), base, base, largest_path,
                  f"prompt {message:,.4g} and output {answer:,.4g} tokens")


def chat_source(tenant: TenantSpec, where: str, what: str, arrivals: list[Factor],
                prefix: float, message: float, answer: float) -> Source:
    """A session of n turns; turn k carries the history of the k before it (all of it, the
    last ceil(sqrt(k)) exchanges, or at most max_context_tokens)."""
    chat = tenant.chat
    if chat.session is not None:
        return session_source(chat, where, what, arrivals, prefix, message, answer)
    turns = count(chat.turns)
    exchange = message + answer
    if chat.context_growth == "linear":
        carried = exchange * turns * (turns - 1) / 2
        last = exchange * (turns - 1)
    elif chat.context_growth == "sublinear":
        carried = exchange * 2 / 3 * turns**1.5
        last = exchange * math.ceil(math.sqrt(turns - 1))
    else:
        last = min(exchange * (turns - 1), chat.max_context_tokens)
        carried = turns * last
    tokens = turns * (prefix + exchange) + carried
    return Source(what, arrivals, Factor(f"{where}.chat.turns", turns, "turns"), tokens,
                  prefix + last + exchange, f"{where}.chat.turns",
                  f"the last of {turns:,.4g} turns carries about {last:,.4g} tokens of history")


def session_source(chat: ChatConfig, where: str, what: str, arrivals: list[Factor],
                   prefix: float, message: float, answer: float) -> Source:
    """A session Markov model's session: turn k happens with the probability the walk has not
    ended before it (the start state's row of the transition matrix raised to k), so the
    expected turns and carried history are sums over k; lengths are the longest state's."""
    model = chat.session
    assert model is not None
    ids = {state.id: i for i, state in enumerate(model.states)}
    moves = np.zeros((len(ids), len(ids)))
    for state in model.states:
        for target, p in state.next.items():
            moves[ids[state.id], ids[target]] += p
    message = max([message, *(count(st.prompt) for st in model.states if st.prompt)])
    answer = max([answer, *(count(st.output) for st in model.states if st.output)])
    exchange = message + answer
    at = np.zeros(len(ids))
    at[ids[model.start]] = 1.0
    turns = carried = 0.0
    last = 0.0
    for k in range(model.max_turns):
        happens = float(at.sum())
        if happens <= 0:
            break
        if chat.context_growth == "linear":
            history = exchange * k
        elif chat.context_growth == "sublinear":
            history = exchange * math.ceil(math.sqrt(k))
        else:
            history = min(exchange * k, chat.max_context_tokens)
        turns += happens
        carried += happens * history
        last = history
        at = at @ moves
    tokens = turns * (prefix + exchange) + carried
    return Source(what, arrivals, Factor(f"{where}.chat.session", turns, "turns"), tokens,
                  prefix + last + exchange, f"{where}.chat.session.max_turns",
                  f"the session's last possible turn carries about {last:,.4g} tokens of "
                  "history")


def agentic_source(tenant: TenantSpec, where: str, what: str, arrivals: list[Factor],
                   prefix: float, message: float, answer: float) -> Source:
    """Steps until a step ends without a tool call (probability 1 - p) or the calls run out;
    each step's context grows by its output and the tool's result."""
    agent = tenant.agentic
    calls, p = count(agent.max_tool_calls), agent.tool_call_probability
    steps = calls + 1 if p >= 1 else (1 - p ** (calls + 1)) / (1 - p)
    growth = answer + count(agent.tool_result_tokens)
    tokens = steps * (prefix + message + answer) + growth * carried_steps(calls, p)
    last = growth * calls if p > 0 else 0.0
    return Source(what, arrivals, Factor(f"{where}.agentic.max_tool_calls", steps, "steps"),
                  tokens, prefix + message + last + answer, f"{where}.agentic.max_tool_calls",
                  f"the last of {steps:,.4g} steps carries about {last:,.4g} tokens of "
                  "context")


def carried_steps(calls: float, p: float) -> float:
    """The mean of S(S-1)/2 over a session of S steps (S - 1 is a geometric number of tool
    calls capped at `calls`): the steps' carried contexts in units of one step's growth. Step
    j+1 carries j growths and happens with probability p^j, so this is sum_{j<=calls} j p^j
    (the mean of S put into S(S-1)/2 undercounts it: a long session carries far more)."""
    if p >= 1:
        return calls * (calls + 1) / 2
    if p <= 0:
        return 0.0
    return p * (1 - (calls + 1) * p ** calls + calls * p ** (calls + 1)) / (1 - p) ** 2


def prefix_tokens(workload: TenantsWorkload, tenant: TenantSpec) -> float:
    """The longest shared prefix the tenant may start a request with (0 without one)."""
    if tenant.prefix is None:
        return 0.0
    names = set(tenant.prefix.groups or (g.id for g in workload.prefix_groups))
    return max(count(g.length) for g in workload.prefix_groups if g.id in names)


def count(dist: Distribution) -> float:
    """The mean of a token-count draw: the configured mean within the clamp every draw gets
    ([max(min, 1), min(max, MAX_TOKENS)]; a tail with an infinite mean is at the top)."""
    low, high = token_bounds(dist)
    mean = mean_of(dist)
    return float(min(max(mean, low), high))


def profile_mean(workload: TenantsWorkload) -> float:
    """The load profile's mean multiplier over the arrival window."""
    from blis_simpy.workload.arrivals import time_change  # (tenants workloads only)

    assert workload.load_profile is not None
    total = time_change(workload.load_profile).cumulative(np.array(workload.duration_s))
    return float(total) / workload.duration_s


def check_polls(scenario: Scenario) -> None:
    """Autoscaler polls over the run: one per config per interval, from the start to the
    horizon (or the end of arrivals when there is none: a trace's end is not known yet)."""
    deployment = scenario.deployment
    if deployment is None or deployment.autoscaler is None:
        return
    span = scenario.horizon_s or arrival_window(scenario.workload)
    if span is None:
        return
    interval = deployment.autoscaler.interval_s
    polls = span / interval * len(deployment.configs())
    if polls > MAX_POLLS:
        raise ScenarioError("deployment.autoscaler.interval_s",
                            f"about {polls:,.0f} polls ({len(deployment.configs())} configs "
                            f"over {span:,.4g} s, one every {interval:g} s); the limit is "
                            f"{MAX_POLLS:,}",
                            f">= {span * len(deployment.configs()) / MAX_POLLS:.3g} s, or a "
                            "shorter horizon_s")


def check_crashes(scenario: Scenario) -> None:
    """Random crashes over the run (horizon, else the arrivals' window): one per instance
    per mean time between failures, counting every replica the fault may reach (the named
    ones, else the deployment's largest fleet)."""
    faults = scenario.faults
    span = scenario.horizon_s or arrival_window(scenario.workload)
    if faults is None or span is None:
        return
    for i, entry in enumerate(faults.random_crashes):
        reached = len(entry.instances) or scenario.most_instances()
        mtbf = mean_of(entry.mtbf_s)
        crashes = span / mtbf * reached
        if crashes > MAX_POLLS:
            raise ScenarioError(f"faults.random_crashes[{i}].mtbf_s",
                                f"about {crashes:,.0f} crashes ({reached} instances over "
                                f"{span:,.4g} s, one every {mtbf:g} s each); the limit is "
                                f"{MAX_POLLS:,}",
                                f"a mean >= {span * reached / MAX_POLLS:.3g} s, or a shorter "
                                "horizon_s")


def arrival_window(workload: Workload) -> float | None:
    if isinstance(workload, TenantsWorkload):
        return workload.duration_s
    if isinstance(workload, DistributionWorkload):
        return workload.num_requests / workload.rate_per_s
    return None
