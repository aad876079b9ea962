"""Placement on node pools (`deployment.node_pools`): which node's GPUs each replica holds.

A replica takes its config's tensor-parallel degree in GPUs on one node of the config's pool.
The node is chosen by best fit: the ready node with the fewest free GPUs that still has room
(ties to the first), so large holes stay open for large replicas; else a node still
provisioning that has room; else, while the pool is below `max_nodes`, a new node, ready after
its provisioning time (`provisioning`: a draw per node, µs); else the replica is not placed and not
started. A replica on a provisioning node starts its own provisioning when the node is ready.
A terminated replica's GPUs are free at once. Nodes, once added, stay for the run.

Every change is written to the ScaleLog's `placements` channel (placed, released, unplaced,
node_added, node_ready); the node pool metrics and the placement columns of the replicas table
are computed from it.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from blis_simpy.cluster.actuation import Timer
from blis_simpy.config.node_pools import NodePool
from blis_simpy.core.clock import Environment
from blis_simpy.core.scale_log import ScaleLog


class Node:
    """One machine: its GPUs, how many are free, and (while provisioning) when it is ready."""

    __slots__ = ("free", "gpus", "id", "pool", "ready")

    def __init__(self, node_id: str, pool: NodePool, ready: simpy.Event | None) -> None:
        self.id = node_id
        self.pool = pool
        self.gpus = pool.gpus_per_node
        self.free = pool.gpus_per_node
        self.ready = ready  # None once the node is ready


class Placement:
    """Every pool's nodes while the run goes on, and which replica holds GPUs where."""

    def __init__(self, env: Environment, pools: list[NodePool], log: ScaleLog,
                 provisioning: Callable[[NodePool], int]) -> None:
        self.env = env
        self.log = log
        self.nodes: dict[str, list[Node]] = {}
        self.held: dict[str, tuple[Node, int]] = {}  # instance id -> (node, GPUs)
        self.draw = provisioning
        for pool in pools:
            self.nodes[pool.id] = []
            for _ in range(pool.nodes):
                node = self._new_node(pool, None)
                self._note(node, "", "", 0, "node_ready")

    def _new_node(self, pool: NodePool, ready: simpy.Event | None) -> Node:
        nodes = self.nodes[pool.id]
        node = Node(f"{pool.id}/node-{len(nodes)}", pool, ready)
        nodes.append(node)
        return node

    def _note(self, node: Node, instance: str, config: str, gpus: int, what: str) -> None:
        self.log.placements.append((self.env.now, instance, config, node.pool.id, node.id,
                                    gpus, what))

    def find(self, pool: NodePool, gpus: int, config: str) -> Node | None:
        """A node with `gpus` free GPUs for a new replica of `config` (a new node if the pool
        may grow); None if there is none. The caller holds the GPUs with `hold`."""
        nodes = self.nodes[pool.id]
        fits = [n for n in nodes if n.free >= gpus]
        ready = [n for n in fits if n.ready is None]
        if ready or fits:
            return min(ready or fits, key=lambda n: n.free)
        if len(nodes) < pool.most and gpus <= pool.gpus_per_node:
            timer = Timer(self.env, self.draw(pool))
            node = self._new_node(pool, timer)
            timer.callbacks.append(lambda _: self._ready(node))
            self._note(node, "", config, 0, "node_added")
            return node
        self.log.placements.append((self.env.now, "", config, pool.id, "", gpus, "unplaced"))
        return None

    def _ready(self, node: Node) -> None:
        node.ready = None
        self._note(node, "", "", 0, "node_ready")

    def hold(self, node: Node, instance: str, config: str, gpus: int) -> None:
        node.free -= gpus
        self.held[instance] = (node, gpus)
        self._note(node, instance, config, gpus, "placed")

    def release(self, instance: str, config: str) -> None:
        found = self.held.pop(instance, None)
        if found is not None:
            node, gpus = found
            node.free += gpus
            self._note(node, instance, config, gpus, "released")


class Seats:
    """One deployment config's (or P/D pool's) view of the placement: its pool and the GPUs
    each of its replicas takes."""

    def __init__(self, placement: Placement, pool: NodePool, config: str, gpus: int) -> None:
        self.placement = placement
        self.pool = pool
        self.config = config
        self.gpus = gpus

    def find(self) -> Node | None:
        return self.placement.find(self.pool, self.gpus, self.config)

    def hold(self, node: Node, instance: str) -> simpy.Event | None:
        """The replica holds its GPUs on `node`; the event it must wait for before its own
        start-up (the node's provisioning), if any."""
        self.placement.hold(node, instance, self.config, self.gpus)
        return node.ready

    def release(self, instance: str) -> None:
        self.placement.release(instance, self.config)
