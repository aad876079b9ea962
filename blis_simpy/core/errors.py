"""The package's error types: bad input (`ScenarioError`, which carries the YAML path so messages
can say where; `PolicyError` when it is a user policy's code), and broken invariants
(`InvariantError`)."""

from __future__ import annotations

import re
from collections.abc import Iterable


class ScenarioError(ValueError):
    """A scenario (or command line) value is invalid; `path` is its dotted location."""

    def __init__(self, path: str, problem: str, valid: str | None = None,
                 file: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.valid = valid
        self.file = file
        text = f"{path}: {problem}" if path else problem
        if valid:
            text += f" (valid: {valid})"
        if file:
            text = f"{file}: {text}"
        self.text = printable(text)
        # args rebuild the error (SimPy re-raises a failed process's error as
        # type(e)(*e.args); pickling across processes does the same)
        super().__init__(path, problem, valid, file)

    def __str__(self) -> str:
        return self.text

    def in_file(self, file: object) -> ScenarioError:
        """The same error, saying which file it is in (unless it already names one)."""
        if self.file:
            return self
        return ScenarioError(self.path, self.problem, self.valid, str(file))


# Control characters (newlines, terminal escape sequences) and the bidirectional overrides that
# reorder what a terminal shows: from a file name, a YAML key or a trace field, any of them
# would break an error's one line or take over the terminal that prints it. Compiled by `re` the
# first time a message holds one (most never do: no cost at start-up).
UNPRINTABLE = "[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"


def printable(text: str) -> str:
    """`text` with every unprintable character written as its escape (`\\n`, `\\x1b`)."""
    if text.isprintable():
        return text
    return re.sub(UNPRINTABLE, lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


class PolicyError(ScenarioError):
    """A user policy (`module:Class`) raised or returned something unusable during a run;
    `path` is its place in the scenario (`policies.routing`)."""


class InvariantError(RuntimeError):
    """A simulation invariant (KV conservation, clock monotonicity, request lifecycle) broke:
    a bug in the simulator or in a custom component, never bad input. Raised by the debug
    checks that `build(..., checks=True)` switches on."""


def closest_first(name: str, options: Iterable[str]) -> list[str]:
    """`options` with the ones that look most like `name` first (typos are the usual cause),
    the rest in sorted order."""
    import difflib  # only when a name is wrong: kept off every run's start-up

    pool = sorted(set(options))
    lowered = {o.lower(): o for o in pool}
    near = [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n=3,
                                                          cutoff=0.5)]
    return near + [o for o in pool if o not in near]
