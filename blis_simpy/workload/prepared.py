"""A workload prepared once and run many times: what a policy search does.

A sweep runs every candidate on the same scenario and seed (common random numbers), so every
run would draw the same requests, make up the same token ids and hash the same KV blocks: a
third of a small evaluation. A `PreparedWorkload` holds those requests, drawn and hashed, never
run; each run gets fresh copies (`Request.clone`) sharing their block hashes. Synthetic and
trace workloads only: a tenants workload issues requests from processes that react to the
run (sessions, closed loops), so it has nothing to prepare.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TenantsWorkload
from blis_simpy.core.request import Request
from blis_simpy.workload.source import requests_of
from blis_simpy.workload.work import check_work


@dataclass(frozen=True)
class PreparedWorkload:
    """The requests of one (workload, seed), drawn and hashed; never run themselves."""

    key: str
    requests: tuple[Request, ...]
    notes: tuple[str, ...]

    def fresh(self) -> Iterator[Request]:
        """Copies to run, made as the run reaches them."""
        return (req.clone() for req in self.requests)


def workload_key(scenario: Scenario) -> str:
    """Everything the requests depend on: the workload section, the seed, the horizon, the
    block size, the generator (compat mode) and the served models (a trace is checked
    against them)."""
    plain = scenario.to_dict()
    models = plain.get("deployment") and [m["name"] for m in plain["deployment"]["models"]]
    return json.dumps([plain["workload"], scenario.workload_seed, plain["horizon_s"],
                       plain["engine"]["block_size"], plain["compat"], models],
                      sort_keys=True, default=str)


def prepare(scenario: Scenario, *, reference_draws: bool, max_requests: int = 200_000
            ) -> PreparedWorkload | None:
    """The scenario's requests prepared, or None for a tenants workload or one of more than
    `max_requests` requests (a long trace: its hashes would stay in memory)."""
    if isinstance(scenario.workload, TenantsWorkload):
        return None
    check_work(scenario)  # before drawing anything: the run's own check comes later
    source = requests_of(scenario, reference_draws=reference_draws)
    kept: list[Request] = []
    for req in source.requests:
        if len(kept) == max_requests:
            return None
        kept.append(req)
    return PreparedWorkload(workload_key(scenario), tuple(kept), tuple(source.notes))


class WorkloadCache:
    """The last few prepared workloads of a worker process, by `workload_key`; a workload of
    more than `max_requests` requests is not kept (a long trace would hold its hashes)."""

    def __init__(self, size: int = 8, max_requests: int = 200_000) -> None:
        self.size, self.max_requests = size, max_requests
        self.kept: OrderedDict[str, PreparedWorkload | None] = OrderedDict()

    def get(self, scenario: Scenario, *, reference_draws: bool) -> PreparedWorkload | None:
        key = workload_key(scenario)
        if key in self.kept:
            self.kept.move_to_end(key)
            return self.kept[key]
        prepared = prepare(scenario, reference_draws=reference_draws,
                           max_requests=self.max_requests)
        self.kept[key] = prepared
        if len(self.kept) > self.size:
            self.kept.popitem(last=False)
        return prepared
