"""The package's error types: bad input (`ScenarioError`, which carries the YAML path so messages
can say where) and broken invariants (`InvariantError`)."""


class ScenarioError(ValueError):
    """A scenario (or command line) value is invalid; `path` is its dotted location."""

    def __init__(self, path: str, problem: str, valid: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.valid = valid
        text = f"{path}: {problem}" if path else problem
        if valid:
            text += f" (valid: {valid})"
        super().__init__(text)


class InvariantError(RuntimeError):
    """A simulation invariant (KV conservation, clock monotonicity, request lifecycle) broke:
    a bug in the simulator or in a custom component, never bad input. Raised by the debug
    checks that `build(..., checks=True)` switches on."""
