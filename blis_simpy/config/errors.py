"""The one error type for bad input: it carries the YAML path so messages can say where."""


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
