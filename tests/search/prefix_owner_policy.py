# ruff: noqa: F821 (a code policy: the names it uses are put in its scope by the loader)
# An evolved routing policy (what the mock LLM of the OpenEvolve demo returns): a code policy,
# so RoutingPolicy and RoutingDecision are in scope without an import.
class Policy(RoutingPolicy):
    """Prefix owner: a request goes where its first prompt block went before; new prefixes go
    to the least loaded instance."""

    def __init__(self, params=None):
        super().__init__(params)
        self.owner = {}

    def route(self, req, priority, snapshots, state, clock):
        ids = [s.id for s in snapshots]
        loads = [s.effective_load for s in snapshots]
        key = req.prefix_hashes[0] if req.prefix_hashes else None
        target = self.owner.get(key)
        if target not in ids:
            target = ids[loads.index(min(loads))]
            if key is not None:
                self.owner[key] = target
        scores = tuple(1.0 if i == target else 0.0 for i in ids)
        return RoutingDecision(target, "prefix owner", scores)
