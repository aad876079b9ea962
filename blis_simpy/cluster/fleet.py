"""The fleet: every instance of a run by its stable id, and the ones that may be routed to.

Everything that routes or observes instances (the gateway, the snapshot provider, routing
policies) iterates `routable` and keys what it keeps per instance by id, so instances can join
and leave during a run without rebuilding anything.
"""

from __future__ import annotations

from collections.abc import Iterator

from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.engine.instance import Instance


class Fleet:
    """Instances in the order they joined; `routable` holds the active ones, in that order
    (routing ties go to the earliest)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Instance] = {}
        self.routable: list[Instance] = []
        self.routable_ids: tuple[str, ...] = ()

    def add(self, instance: Instance) -> None:
        if instance.id in self.by_id:
            raise ValueError(f"duplicate instance id {instance.id!r}")
        self.by_id[instance.id] = instance
        if instance.state is Lifecycle.ACTIVE:
            self.routable.append(instance)
            self.routable_ids = (*self.routable_ids, instance.id)

    def __iter__(self) -> Iterator[Instance]:
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, instance_id: str) -> Instance | None:
        return self.by_id.get(instance_id)
