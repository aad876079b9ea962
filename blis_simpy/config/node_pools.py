"""Node pools (`deployment.node_pools`): the machines replicas are placed on, each pool a number
of nodes with GPUs of one type (the reference head's `node_pools`; cluster/placement.py).

A replica takes tensor-parallel-degree GPUs on one node of its config's pool. With node pools,
scale-up is limited by free GPUs: a replica that fits nowhere waits for a node the pool adds
(up to `max_nodes`, after the node's provisioning time), or, when the pool cannot grow, is not
started. Without the section replicas need no GPUs, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_simpy.config.distributions import Constant, Distribution
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec

MAX_NODES = 10_000
MAX_GPUS_PER_NODE = 64


def zero() -> Distribution:
    return Constant(value=0.0)


@dataclass(frozen=True, slots=True)
class NodePool:
    id: str = spec(help="pool id, unique in the scenario, e.g. h100-pool")
    gpu: str = spec(help="the GPU type of every node, e.g. H100 (a config placed here must "
                    "use it)")
    gpus_per_node: int = spec(8, help="GPUs on each node", ge=1, le=MAX_GPUS_PER_NODE)
    nodes: int = spec(1, help="nodes ready at t=0", ge=0, le=MAX_NODES)
    max_nodes: int | None = spec(None, help="nodes the pool may grow to when a replica fits "
                                 "nowhere; default: nodes (a fixed pool)", ge=0, le=MAX_NODES)
    provisioning_s: Distribution = spec(factory=zero, help="a new node's start-up time (s), "
                                        "drawn per node from the 'nodes' stream")

    @property
    def most(self) -> int:
        return self.nodes if self.max_nodes is None else self.max_nodes

    def validate(self, path: str) -> None:
        if self.max_nodes is not None and self.max_nodes < self.nodes:
            raise ScenarioError(join(path, "max_nodes"), f"{self.max_nodes} is below nodes "
                                f"{self.nodes}", f"at least {self.nodes}, or leave it out")


def check_pools(pools: list[NodePool], path: str) -> None:
    """Pool ids are unique."""
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        if pool.id in seen:
            raise ScenarioError(join(join(path, i), "id"), f"duplicate node pool {pool.id!r}")
        seen.add(pool.id)


def pool_for(pools: list[NodePool], named: str | None, gpu: str, path: str) -> NodePool:
    """The pool a config's replicas go on: the one it names, else the only one with its GPU
    type; the pool's GPU type must be the config's."""
    if named is not None:
        found = next((p for p in pools if p.id == named), None)
        if found is None:
            raise ScenarioError(join(path, "node_pool"), f"no node pool {named!r}",
                                ", ".join(p.id for p in pools))
        if found.gpu.lower() != gpu.lower():
            raise ScenarioError(join(path, "node_pool"), f"pool {named!r} has {found.gpu} "
                                f"GPUs; this config runs on {gpu}",
                                ", ".join(p.id for p in pools if p.gpu.lower() == gpu.lower())
                                or f"a pool of {gpu} nodes")
        return found
    matching = [p for p in pools if p.gpu.lower() == gpu.lower()]
    if len(matching) != 1:
        what = "no node pool has" if not matching else "several node pools have"
        raise ScenarioError(join(path, "node_pool"), f"{what} {gpu} GPUs: name the config's "
                            "pool", ", ".join(p.id for p in pools))
    return matching[0]
