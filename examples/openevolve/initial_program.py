# The seed program for OpenEvolve: a routing policy as a blis-simpy code policy.
# RoutingPolicy, RoutingDecision and argmax are in scope; imports are limited to the standard
# modules listed in blis_simpy.search.code.ALLOWED_IMPORTS, and state lives on `self`.
# EVOLVE-BLOCK-START
class Policy(RoutingPolicy):
    """Round robin: each instance in turn, blind to load and to cached prefixes."""

    def __init__(self, params=None):
        super().__init__(params)
        self.turn = 0

    def route(self, req, priority, snapshots, state, clock):
        chosen = self.turn % len(snapshots)
        self.turn += 1
        scores = tuple(1.0 if i == chosen else 0.0 for i in range(len(snapshots)))
        return RoutingDecision(snapshots[chosen].id, "round robin", scores)
# EVOLVE-BLOCK-END
