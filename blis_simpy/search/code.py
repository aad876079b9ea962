"""Code policies: a candidate's Python source implementing one policy axis, as GEPA and
OpenEvolve produce it, checked before it runs.

The seeds disagree on arbitrary code (000 rules it out, 001 evolves it), so it is supported,
contained: the source runs only inside the sandbox (docs/security.md), in a process of its own
that answers the simulation's calls (`blis_simpy.search.remote`). This module is the fast first
filter, which refuses most of what could not run there with a clear message: the source must
parse, import only `ALLOWED_IMPORTS`, call none of `FORBIDDEN_NAMES` (I/O, reflection, dynamic
code, process-dependent values such as `hash` and `id`), build no set literal (a set iterates
in hash order; inside the sandbox the hash seed is fixed, but a dict says what is meant), touch
no private or dunder attribute or name, no frame or code introspection attribute and no string
holding `__`, call no helper that takes attribute names as strings (`WITHHELD`), match
positionally only on built-in types, annotate only with types' names, and keep no state
outside its policy object (no `global`; module- and class-level
values are constants, annotations and dataclass fields). It is not the boundary: code written
to get past it still meets the operating system's.

A candidate defines a class (`entry`, default `Policy`) deriving from its axis's base class;
the base classes and decision types are in scope without an import:

```python
class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        best = min(range(len(snapshots)), key=lambda i: snapshots[i].effective_load)
        scores = tuple(1.0 if i == best else 0.0 for i in range(len(snapshots)))
        return RoutingDecision(snapshots[best].id, "least load", scores)
```
"""

from __future__ import annotations

import ast
import hashlib
import re
import string
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.yamlio import load_yaml
from blis_simpy.policies.bundle import AXES, PolicyBundle
from blis_simpy.search.cell import ALLOWED_IMPORTS, AXIS_NAMES, FORBIDDEN_NAMES

# Introspection attributes of frames, code, generators, coroutines and tracebacks: the way from
# a generator expression to its caller's frame and that frame's globals.
INTROSPECTION = ("gi_", "f_", "co_", "tb_", "cr_", "ag_")
# typing's and inspect's helpers that evaluate annotation strings with the real builtins
# (an annotation "getattr" comes back as the builtin the check refuses by name)
EVALUATING = frozenset({"get_type_hints", "ForwardRef", "evaluate_forward_ref",
                        "get_annotations"})
# Standard-library helpers a candidate is not offered (`cell.OFFERED`), refused by name with
# why: each reaches what the check refuses, through strings it cannot see.
WITHHELD = {
    "singledispatch": "its register() evaluates annotation strings with the real builtins",
    "singledispatchmethod": "its register() evaluates annotation strings with the real "
                            "builtins",
    "update_wrapper": "it copies attributes named by strings (assigned=, updated=), dunders "
                      "included",
    "wraps": "it copies attributes named by strings (assigned=, updated=), dunders included",
    "make_dataclass": "its field names and namespace are strings, dunders included"}
# str's methods that read attributes named in the format string ('{0.x}'): on a literal only,
# which the check sees (a string holding '__' is refused).
FORMATTING = frozenset({"format", "format_map"})
# Built-in types whose class pattern takes one positional sub-pattern matched against the
# subject itself (`case int(n)`), not an attribute: the only positional class patterns allowed.
SELF_MATCHING = frozenset({"bool", "bytearray", "bytes", "dict", "float", "int", "list",
                           "str", "tuple"})
WHY_NOT = {"random": "non-deterministic: a policy gets no random source, the simulation must "
           "be reproducible", "time": "wall-clock time makes runs non-deterministic",
           "os": "no I/O or process access", "sys": "no interpreter access",
           "subprocess": "no processes", "socket": "no network", "numpy": "not allowed"}
MAX_SOURCE = 100_000  # characters
BUNDLE = "bundle"  # the candidate component holding policy bundle YAML


@dataclass(frozen=True)
class CodePolicy:
    """A candidate for one axis as Python source; `id` names it in the sweep's rows and
    `bundle`, if any, sets the other axes."""

    axis: str
    source: str
    entry: str = "Policy"
    id: str = ""
    bundle: PolicyBundle | None = None

    def __post_init__(self) -> None:
        for name in ("axis", "source", "entry", "id"):
            value = getattr(self, name)
            if not isinstance(value, str):
                hint = " (decode it first)" if isinstance(value, bytes | bytearray) else ""
                raise ScenarioError(f"CodePolicy.{name}", f"expected text, got "
                                    f"{type(value).__name__}{hint}")
        if self.bundle is not None and not isinstance(self.bundle, PolicyBundle):
            raise ScenarioError("CodePolicy.bundle", f"expected a PolicyBundle or None, got "
                                f"{type(self.bundle).__name__}")

    @property
    def module_name(self) -> str:
        """Unique per axis, entry point and source, so two candidates never share a module
        (their stand-ins differ in their class's name or base: `remote.Modules`)."""
        identity = "\0".join((self.axis, self.entry, self.source))
        digest = hashlib.sha256(identity.encode(errors="surrogatepass")).hexdigest()[:16]
        return f"blis_candidate_{digest}"

    @property
    def type_name(self) -> str:
        return f"{self.module_name}:{self.entry}"


class CodeRejected(ValueError):
    """The source broke a rule of the static check; the message says which, and where."""


def check(code: CodePolicy) -> None:
    """Raise CodeRejected unless the source is acceptable (module docstring)."""
    if code.axis not in AXIS_NAMES:
        raise CodeRejected(f"unknown axis {code.axis!r} (valid: {', '.join(AXIS_NAMES)})")
    if len(code.source) > MAX_SOURCE:
        raise CodeRejected(f"source of {len(code.source)} characters; at most {MAX_SOURCE}")
    nul = code.source.find("\0")
    if nul >= 0:  # (ast.parse says so with no line, or raises ValueError: it varies)
        line = code.source.count("\n", 0, nul) + 1
        column = nul - code.source.rfind("\n", 0, nul)
        raise CodeRejected(f"line {line}, column {column}: a NUL character (\\x00), which "
                           "Python source cannot hold")
    try:
        tree = ast.parse(code.source)
    except SyntaxError as exc:
        at = "" if exc.lineno is None else f"line {exc.lineno}: "
        raise CodeRejected(f"{at}syntax error: {exc.msg}") from None
    for node in ast.walk(tree):
        problem = node_problem(node)
        if problem:
            raise CodeRejected(f"line {getattr(node, 'lineno', '?')}: {problem}")
    for statement in tree.body:
        where, problem = top_level_problem(statement)
        if problem:
            raise CodeRejected(f"line {where}: {problem}")
    classes = {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
    if code.entry not in classes:
        base = next(n for n in AXIS_NAMES[code.axis] if n.endswith(("Policy", "Scheduler")))
        raise CodeRejected(f"no class {code.entry} (it must be defined at the top level and "
                           f"derive from {base})")


def node_problem(node: ast.AST) -> str:
    if isinstance(node, ast.Import | ast.ImportFrom):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) \
            else [node.module or "."]
        for name in names:
            root = name.split(".")[0]
            if root not in ALLOWED_IMPORTS:
                why = WHY_NOT.get(root, "not in the allowed modules")
                return f"import {name}: {why} (allowed: {', '.join(ALLOWED_IMPORTS)})"
    helper = named_helper(node, EVALUATING)
    if helper:
        return f"{helper} is not allowed (it evaluates annotation strings with the real builtins)"
    withheld = named_helper(node, WITHHELD)
    if withheld:
        return f"{withheld} is not allowed in a policy ({WITHHELD[withheld]})"
    rebound = rebound_type(node)
    if rebound:
        return f"{rebound} cannot be rebound (class patterns like case {rebound}(x) rely on " \
            "it being the built-in type)"
    annotation = annotation_problem(node)
    if annotation:
        return annotation
    if isinstance(node, ast.Global | ast.Nonlocal):
        return "global/nonlocal state is not allowed: keep state on the policy object"
    if isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
        return f"{node.id} is not allowed in a policy (no I/O, reflection or dynamic code)"
    if isinstance(node, ast.Attribute):
        if node.attr in FORMATTING:
            if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                return f"{node.attr} is allowed on a string literal only ('{{}} of {{}}'" \
                    ".format(a, b)): a format string built at run time reads attributes by " \
                    "name ('{0.x}')"
            problem = format_problem(node.value.value)
            if problem:
                return f"format string: {problem}"
        return attribute_problem(node.attr)
    pattern = pattern_problem(node)
    if pattern:
        return pattern
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
        return "strings containing '__' are not allowed (they name dunder attributes)"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
            and node.name.startswith("__") and node.name != "__init__":
        return f"{node.name}: dunder definitions other than __init__ are not allowed"
    if isinstance(node, ast.Set | ast.SetComp) or (
            isinstance(node, ast.Name) and node.id in ("set", "frozenset")):
        return ("sets are not allowed: a set iterates in hash order, which for most objects is "
                "their place in memory, so runs could differ between workers; use a dict "
                "(insertion-ordered)")
    if isinstance(node, ast.AsyncFunctionDef | ast.Await | ast.Yield | ast.YieldFrom):
        return "generators and coroutines are not allowed in a policy"
    return ""


def attribute_problem(attr: str, init_allowed: bool = True) -> str:
    """Why reading attribute `attr` is refused, whether written `x.attr` or matched as
    `case x(attr=...)`, else "" (`__init__` only where `super().__init__` needs it)."""
    if attr.startswith("_") and not (init_allowed and attr == "__init__"):
        return f"attribute {attr} is not allowed (no dunder or private access)"
    if attr.startswith(INTROSPECTION):
        return f"attribute {attr} is not allowed (no frame or code introspection)"
    if attr in EVALUATING:
        return f"attribute {attr} is not allowed (it evaluates annotation strings with the " \
            "real builtins)"
    return ""


def pattern_problem(node: ast.AST) -> str:
    """Pattern matching names attributes and bindings as plain strings, which no Attribute or
    Name node shows: `case object(__globals__=g)` reads an attribute as `g.__globals__`
    would, so the same names are refused (`attribute_problem`)."""
    if isinstance(node, ast.MatchClass):
        if node.patterns and not (isinstance(node.cls, ast.Name)
                                  and node.cls.id in SELF_MATCHING):
            return ("positional sub-patterns are allowed on built-in types only "
                    f"({', '.join(sorted(SELF_MATCHING))}): on another class they read the "
                    "attributes its __match_args__ names, which this check cannot see; "
                    "name them: case Point(x=a, y=b)")
        for attr in node.kwd_attrs:
            problem = attribute_problem(attr, init_allowed=False) or (  # (no super() here)
                f"attribute {attr} is not allowed (a format string built at run time reads "
                "attributes by name)" if attr in FORMATTING else "")
            if problem:
                return f"pattern {problem}"
    bound = node.name if isinstance(node, ast.MatchAs | ast.MatchStar) else \
        node.rest if isinstance(node, ast.MatchMapping) else None
    if bound is not None and (bound.startswith("__") or bound in FORBIDDEN_NAMES):
        return f"pattern name {bound} is not allowed"
    return ""


def format_problem(text: str, depth: int = 0) -> str:
    """Why a literal format string is refused: an attribute its fields read (`{0.gi_frame}`)
    that `x.attr` could not read, else ""."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return ""  # (str.format raises the same at run time)
    for _, name, spec, _ in fields:
        for attr in re.findall(r"\.([^.\[]*)", name or ""):
            problem = attribute_problem(attr, init_allowed=False)
            if problem:
                return problem
        if spec and depth < 2:
            problem = format_problem(spec, depth + 1)
            if problem:
                return problem
    return ""


def named_helper(node: ast.AST, helpers: Collection[str]) -> str:
    """The one of `helpers` a node names (`x`, `m.x`) or imports (`from m import x`), else
    ""."""
    if isinstance(node, ast.Name) and node.id in helpers:
        return node.id
    if isinstance(node, ast.Attribute) and node.attr in helpers:
        return node.attr
    if isinstance(node, ast.ImportFrom):
        return next((a.name for a in node.names if a.name in helpers), "")
    return ""


# What an annotation may be built of (`list[int]`, `int | None`, `Callable[[int], float]`,
# `"Params"`): a type's name, not a computation.
ANNOTATION_NODES = (ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Tuple, ast.List,
                    ast.BinOp, ast.BitOr, ast.Load)


# What a string in an annotation may not hold: a call or anything that runs code.
CALLING = (ast.Call, ast.Lambda, ast.NamedExpr, ast.ListComp, ast.DictComp, ast.GeneratorExp,
           ast.SetComp, ast.Await, ast.Yield, ast.YieldFrom)


def annotation_problem(node: ast.AST) -> str:
    """Why the annotation a node carries is refused, else "": an annotation is stored as text
    (the candidate's module inherits `from __future__ import annotations`) and a helper that
    evaluates it runs it with the real builtins, so it may only name types; a string in it
    that reads as an expression is held to the same rule."""
    annotation = node.annotation if isinstance(node, ast.AnnAssign | ast.arg) else \
        node.returns if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None
    if annotation is None:
        return ""
    return annotation_shape(annotation, 0)


def annotation_shape(annotation: ast.expr, depth: int) -> str:
    """The annotation's own shape (types' names), then its strings (`annotation_strings`)."""
    for part in ast.walk(annotation):
        if not isinstance(part, ANNOTATION_NODES) or (
                isinstance(part, ast.BinOp) and not isinstance(part.op, ast.BitOr)):
            return f"annotations may only name types (names, X[Y], X | Y, strings of " \
                f"them), not compute: {ast.unparse(annotation)[:80]!r}"
    return annotation_strings(annotation, depth)


def annotation_strings(annotation: ast.expr, depth: int) -> str:
    """A string in an annotation that reads as an expression is evaluated as one by the
    helpers that evaluate annotations: it may call nothing and break no rule (text such as
    `Literal["least-load"]` stays text)."""
    for part in ast.walk(annotation):
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            try:
                inner = ast.parse(part.value.strip(), mode="eval").body
            except SyntaxError:
                continue  # (text such as Literal["least load"]: no expression to run)
            problem = "annotations nest too deep" if depth > 3 else next(
                (p for p in map(node_problem, ast.walk(inner)) if p), "") or next(
                (f"annotations may only name types, not call: {part.value[:80]!r}"
                 for p in ast.walk(inner) if isinstance(p, CALLING)), "") or \
                annotation_strings(inner, depth + 1)
            if problem:
                return problem
    return ""


def rebound_type(node: ast.AST) -> str:
    """The name of `SELF_MATCHING` a node binds (an assignment, a parameter, a definition, an
    import alias, a pattern capture), else ""."""
    names: list[str | None] = []
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        names = [node.id]
    elif isinstance(node, ast.arg):
        names = [node.arg]
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        names = [node.name]
    elif isinstance(node, ast.alias):
        names = [node.asname or node.name]
    elif isinstance(node, ast.MatchAs | ast.MatchStar):
        names = [node.name]
    elif isinstance(node, ast.MatchMapping):
        names = [node.rest]
    elif isinstance(node, ast.ExceptHandler):
        names = [node.name]
    return next((n for n in names if n in SELF_MATCHING), "")


def top_level_problem(statement: ast.stmt) -> tuple[int, str]:
    """What survives between calls besides the policy object: module and class bodies may only
    hold imports, definitions, docstrings, constant values, annotations and dataclass fields
    (`field(...)` of constants and names). The line of the first statement that does more."""
    if isinstance(statement, ast.ClassDef):
        for item in statement.body:
            where, problem = top_level_problem(item)
            if problem:
                return where, problem
        return statement.lineno, ""
    if isinstance(statement, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.Pass):
        return statement.lineno, ""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.lineno, ""  # a docstring
    if isinstance(statement, ast.AnnAssign) and (statement.value is None
                                                 or dataclass_field(statement.value)):
        return statement.lineno, ""
    if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None \
            and constant(statement.value):
        return statement.lineno, ""
    return statement.lineno, (
        "only imports, definitions, constant values (numbers, strings, tuples of them), "
        "annotations and dataclass fields at module or class level: state that outlives a "
        "call belongs on the policy object")


def dataclass_field(node: ast.expr) -> bool:
    """`field(...)` or `dataclasses.field(...)` whose arguments are constants or names (such
    as `default_factory=list`): a declaration, each object gets its own value."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    named = (isinstance(func, ast.Name) and func.id == "field") or (
        isinstance(func, ast.Attribute) and func.attr == "field"
        and isinstance(func.value, ast.Name) and func.value.id == "dataclasses")
    arguments = [*node.args, *(k.value for k in node.keywords)]
    return named and all(constant(a) or isinstance(a, ast.Name) for a in arguments)


def constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple):
        return all(constant(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return constant(node.operand)
    if isinstance(node, ast.BinOp):
        return constant(node.left) and constant(node.right)
    return False


def candidate_policy(candidate: Mapping[str, str]) -> PolicyBundle | CodePolicy | None:
    """Named text components (GEPA's candidate form) -> what a sweep runs: `bundle` is policy
    bundle YAML, an axis name holds code for that axis. Raises ScenarioError naming the
    component."""
    if not isinstance(candidate, Mapping):
        raise ScenarioError("candidate", f"a {type(candidate).__name__}, not a mapping",
                            f"a mapping of component name ({BUNDLE} or an axis) to its text")
    for name, text in candidate.items():
        if not isinstance(text, str):
            raise ScenarioError(str(name), f"a {type(text).__name__}, not text",
                                "policy bundle YAML or code-policy source, as a string")
    unknown = sorted(set(candidate) - {BUNDLE, *AXES})
    if unknown:
        raise ScenarioError(unknown[0], "unknown candidate component",
                            ", ".join((BUNDLE, *AXES)))
    bundle = None
    if BUNDLE in candidate:
        try:
            bundle = PolicyBundle.from_dict(load_yaml(candidate[BUNDLE], BUNDLE))
        except ScenarioError as exc:
            raise ScenarioError(f"{BUNDLE}: {exc.path}".rstrip(": "), exc.problem,
                                exc.valid) from None
    code = [axis for axis in AXES if axis in candidate]
    if len(code) > 1:
        raise ScenarioError(code[1], "one code component per candidate",
                            "a bundle plus at most one axis of code")
    if code:
        return CodePolicy(code[0], candidate[code[0]], bundle=bundle)
    return bundle
