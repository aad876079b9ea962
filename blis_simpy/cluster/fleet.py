"""The fleet: every instance of a run by its stable id, and the ones that may be routed to.

Everything that routes or observes instances (the gateway, the snapshot provider, routing
policies) iterates `routable` and keys what it keeps per instance by id, so instances can join
and leave during a run without rebuilding anything.
"""

from __future__ import annotations

from collections.abc import Iterator

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.engine.instance import Instance

CLOSED = (Lifecycle.FAILED, Lifecycle.DEAD, Lifecycle.TERMINATED)  # never routable


class Fleet:
    """Instances in the order they joined; `routable` holds the routable ones (active, or
    warming when warming replicas take traffic), in that order (routing ties go to the
    earliest)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Instance] = {}
        self.routable: list[Instance] = []
        self.routable_ids: tuple[str, ...] = ()

    def add(self, instance: Instance) -> None:
        if instance.id in self.by_id:
            raise ValueError(f"duplicate instance id {instance.id!r}")
        self.by_id[instance.id] = instance
        if instance.routable:
            self.routable.append(instance)
            self.routable_ids = (*self.routable_ids, instance.id)

    def open(self, instance: Instance) -> None:
        """The instance starts taking requests (it keeps its place in join order); never one
        that has failed or is gone."""
        if instance.state in CLOSED:
            raise ValueError(f"cannot open {instance.id} to traffic: it is {instance.state}")
        instance.routable = True
        if instance in self.routable:
            return
        order = list(self.by_id)
        self.routable = sorted([*self.routable, instance], key=lambda i: order.index(i.id))
        self.routable_ids = tuple(i.id for i in self.routable)

    def close(self, instance: Instance) -> None:
        """The instance takes no more requests (draining, or terminated)."""
        instance.routable = False
        self.routable = [i for i in self.routable if i is not instance]
        self.routable_ids = tuple(i.id for i in self.routable)

    def __iter__(self) -> Iterator[Instance]:
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, instance_id: str) -> Instance | None:
        return self.by_id.get(instance_id)

    def holds_adapter(self, instance_id: str, adapter: str) -> bool:
        """Whether the instance has this LoRA adapter in a slot now (engine.lora)."""
        instance = self.by_id.get(instance_id)
        return (instance is not None and instance.adapters is not None
                and adapter in instance.adapters.resident)


class ModelFleets:
    """With several models, each its own fleet: a request goes to the model its trace row
    names, else to its tenant's model, else to the default model."""

    def __init__(self, fleets: dict[str, Fleet], tenants: dict[str, str], default: str) -> None:
        self.fleets = {name.lower(): fleet for name, fleet in fleets.items()}
        self.names = {name.lower(): name for name in fleets}  # as the scenario spells them
        self.tenants = {tenant: model.lower() for tenant, model in tenants.items()}
        self.default = default.lower()

    def name_of(self, req: Request) -> str:
        """The model that serves the request, as the scenario names it."""
        return self.names[self.model_of(req)]

    def fleet_of(self, req: Request) -> Fleet:
        return self.fleets[self.model_of(req)]

    def model_of(self, req: Request) -> str:
        """The (lower-case) model that serves the request."""
        if req.model:
            model = req.model.lower()
            if model not in self.fleets:
                raise ScenarioError("workload", f"{req.name} names model {req.model!r}, which "
                                    "no deployment serves", ", ".join(sorted(self.fleets)))
            return model
        return self.tenants.get(req.tenant_id, self.default)
