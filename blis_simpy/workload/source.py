"""Request sources: each starts SimPy processes on an environment that hand every request to
`deliver` (the gateway's cluster arrival) at its arrival time, and never before (BC-1).

Synthetic and trace workloads are known in advance and are released lazily, in arrival order,
by one process (`release.release`); the tenants workload runs processes per tenant, user and
session that react to completions (`tenants.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import DistributionWorkload, TenantsWorkload, TraceWorkload
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.loop import NamedProcess
from blis_simpy.core.request import Request
from blis_simpy.workload import producer
from blis_simpy.workload.prehash import Scratch, hash_parts, hash_requests
from blis_simpy.workload.release import release
from blis_simpy.workload.synthetic import compat_drawn, compat_requests, native_requests
from blis_simpy.workload.work import check_work

if TYPE_CHECKING:  # (a tenants or trace workload imports its source when it runs)
    from blis_simpy.workload.trace import Trace


class PreparedRequests(Protocol):
    """A prepared workload (`workload/prepared.py`): fresh copies of its requests, and what
    reading them noted."""

    @property
    def requests(self) -> tuple[Request, ...]: ...

    @property
    def notes(self) -> tuple[str, ...]: ...

    def fresh(self) -> Iterator[Request]: ...


class Deliver(Protocol):
    """The gateway's cluster arrival; `alone`: no other request arrives at this time."""

    def __call__(self, req: Request, alone: bool = False) -> None: ...


class Source(NamedTuple):
    """A known workload: its requests in arrival order (made lazily), what the source noted
    about its input (trace rows it skipped, for the run's warnings), how many requests there
    are at most (a trace's rows; None when a horizon may cut a synthetic one), and whether
    each request carries its trace row's own timestamp (a published trace's, for the
    requests table's `trace_time_ns`); `stop`, when the requests are made in another process
    (`workload/producer.py`), ends it once the run no longer needs them."""

    requests: Iterable[Request]
    notes: list[str]
    expected: int | None
    timed: bool = False
    stop: Callable[[], None] | None = None


def start(env: Environment, scenario: Scenario, deliver: Deliver, *,
          reference_draws: bool, keep_tokens: bool = False,
          prepared: PreparedRequests | None = None) -> Source:
    """Start the scenario's source. `reference_draws`: draw synthetic requests with the
    reference's generator (Go's math/rand) and truncate trace times as it does (compat mode).
    A trace is read (and checked) here, before any event runs. `prepared`: this scenario's
    requests, already drawn and hashed (`workload/prepared.py`)."""
    check_work(scenario)
    if prepared is not None:
        NamedProcess(env, release(env, prepared.fresh(), deliver), "release")
        return Source((), list(prepared.notes), len(prepared.requests))
    workload = scenario.workload
    if isinstance(workload, TenantsWorkload):
        from blis_simpy.workload.tenants import TenantWorkload

        TenantWorkload(env, workload, scenario.workload_seed, deliver,
                       None if keep_tokens else scenario.engine.block_size)
        return Source((), [], workload.max_requests)
    if (isinstance(workload, DistributionWorkload) and not keep_tokens
            and producer.wanted(workload.num_requests)):
        try:
            made = producer.Producer(scenario, reference_draws)  # on another core
        except OSError:  # no fork now (a process limit, memory): drawn here, as without
            pass
        else:
            NamedProcess(env, release(env, made.requests(), deliver), "release")
            return Source((), [], workload.num_requests, stop=made.stopped)
    source = requests_of(scenario, reference_draws=reference_draws, prehash=not keep_tokens)
    NamedProcess(env, release(env, source.requests, deliver), "release")
    return source


def requests_of(scenario: Scenario, *, reference_draws: bool, prehash: bool = True
                ) -> Source:
    """A synthetic or trace workload's requests in arrival order, made lazily, with their
    block hashes computed in vectorised chunks unless the token ids are wanted."""
    workload, horizon = scenario.workload, scenario.horizon_us
    requests: Iterable[Request]
    notes: list[str] = []
    timed = False
    block_size = scenario.engine.block_size
    if isinstance(workload, DistributionWorkload):
        expected = workload.num_requests
        if reference_draws and prehash:
            drawn = compat_drawn(workload, scenario.workload_seed, horizon)
            return Source(compat_hashed(drawn, block_size), notes, expected)
        make = compat_requests if reference_draws else native_requests
        requests = make(workload, scenario.workload_seed, horizon)
    else:
        assert isinstance(workload, TraceWorkload)
        from blis_simpy.workload.trace import load_trace

        trace = load_trace(workload, seed=scenario.workload_seed, horizon=horizon,
                           truncate=reference_draws)
        served_models(scenario, trace)
        requests, notes, expected = trace.requests(), trace.notes, len(trace)
        timed = trace.timed
    return Source(hashed(requests, block_size) if prehash else requests,
                  notes, expected, timed)


def served_models(scenario: Scenario, trace: Trace) -> None:
    """With several deployed models, every model a trace row names must be served: checked
    here, before the run (with one model, the rows' model names are informational)."""
    section = scenario.deployment
    if section is None or len(section.models) < 2:
        return
    served = {model.name.lower() for model in section.models}
    unknown = sorted(model for model in trace.models
                     if model and model.lower() not in served)
    if unknown:
        shown = ", ".join(repr(m) for m in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ScenarioError("workload.path", f"trace rows name model(s) {shown} that no "
                            "deployment serves (filter them with workload.models)",
                            ", ".join(m.name for m in section.models))


def hashed(requests: Iterable[Request], block_size: int, chunk_tokens: int = 1 << 18
           ) -> Iterator[Request]:
    """Requests with their block hashes computed a chunk at a time (vectorised), each chunk
    about `chunk_tokens` tokens (2 MiB per array). Hashing alone is fastest in chunks that fit
    the CPU's cache (32K tokens), but in a whole run those cost more than they save: each
    chunk evicts the simulation's own data, and the run slows by ~5 %."""
    batch: list[Request] = []
    size = 0
    scratch = Scratch()
    for req in requests:
        batch.append(req)
        size += req.input_len + req.output_len
        if size >= chunk_tokens:
            hash_requests(batch, block_size, scratch)
            yield from batch
            batch, size = [], 0
    hash_requests(batch, block_size, scratch)
    del scratch  # a few MiB, given back before the run's peak (its outputs being written)
    yield from batch


def compat_hashed(drawn: Iterable[tuple[Request, tuple[np.ndarray, ...]]], block_size: int,
                  chunk_tokens: int = 1 << 18) -> Iterator[Request]:
    """`hashed` for the reference's synthetic draws (`synthetic.compat_drawn`): each chunk's
    token ids go from the generator's draws straight into the hash's work space, never into
    an array per request."""
    batch: list[Request] = []
    parts: list[tuple[np.ndarray, ...]] = []
    size = 0
    scratch = Scratch()
    for req, pieces in drawn:
        batch.append(req)
        parts.append(pieces)
        size += req.input_len + req.output_len
        if size >= chunk_tokens:
            hash_parts(batch, parts, block_size, scratch)
            yield from batch
            batch, parts, size = [], [], 0
    hash_parts(batch, parts, block_size, scratch)
    del scratch
    yield from batch
