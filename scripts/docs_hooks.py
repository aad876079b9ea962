"""mkdocs hooks (mkdocs.yml `hooks:`): the reference pages, made from the code at every build.

The scenario reference is the config dataclasses' own help text and bounds (the `spec(help=...)`
of every field, the loader's one source of truth); the policy reference is each registry's
templates with their `Params`; the output reference lists the columns a real run writes; the
command-line reference is each command's `--help`. None of it is copied by hand, so none of it
can drift. `python scripts/docs_hooks.py DIR` writes the pages into DIR to read them without
mkdocs.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from blis_simpy.core.schema import default_of, field_types, to_plain

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------- scenario file

@dataclasses.dataclass(frozen=True)
class Section:
    """One dataclass met at a YAML path (`workload` as `type: tenants`, `workload.tenants[]`)."""

    path: str
    cls: type
    tag: str | None = None  # the `type:` value selecting this variant of a tagged union

    @property
    def title(self) -> str:
        where = self.path or "top level"
        return f"`{where}` (type: {self.tag})" if self.tag else f"`{where}`"

    @property
    def anchor(self) -> str:
        text = (self.path or "top-level") + (f"-{self.tag}" if self.tag else "")
        return "".join(c if c.isalnum() else "-" for c in text.replace("[]", "-item")).lower()


def sections(cls: type, path: str = "", tag: str | None = None,
             seen: set[type] | None = None) -> Iterator[Section]:
    """Every dataclass of the scenario, depth first in field order, each once: at the first
    path it is met (a distribution used by several keys is described where it first appears,
    and the others link there)."""
    seen = set() if seen is None else seen
    if cls in seen:
        return
    seen.add(cls)
    yield Section(path, cls, tag)
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        child = f"{path}.{f.name}" if path else f.name
        for sub_path, sub, sub_tag in nested(hints[f.name], child):
            yield from sections(sub, sub_path, sub_tag, seen)


def nested(tp: Any, path: str) -> Iterator[tuple[str, type, str | None]]:
    """The dataclasses a field's type holds: itself, a list's items (`path[]`), a mapping's
    values (`path.<key>`), or each variant of a union (tagged by its `type` literal)."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [o for o in get_args(tp) if o is not type(None)]
        for option in options:
            for sub_path, sub, _ in nested(option, path):
                yield sub_path, sub, tag_of(sub) if len(options) > 1 else None
    elif origin is list:
        yield from nested(get_args(tp)[0], f"{path}[]")
    elif origin is dict and get_args(tp):
        yield from nested(get_args(tp)[1], f"{path}.<key>")
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        yield path, tp, None


def tag_of(cls: type) -> str | None:
    tag = field_types(cls).get("type")
    return ", ".join(map(str, get_args(tag))) if get_origin(tag) is Literal else None


def type_text(tp: Any, links: dict[type, str]) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(f"`{plain(a)}`" for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        tags = [tag_of(a) if dataclasses.is_dataclass(a) else None for a in options]
        if len(options) > 1 and all(tags):  # a tagged union: one section per `type:`
            text = "`type:` " + ", ".join(f"[{t}](#{links.get(a, '')})"
                                          for t, a in zip(tags, options, strict=True))
        else:
            text = " or ".join(type_text(a, links) for a in options)
        return f"{text} or null" if len(options) < len(get_args(tp)) else text
    if origin is list:
        return f"list of {type_text(get_args(tp)[0], links)}"
    if origin is dict:
        args = get_args(tp)
        return f"mapping to {type_text(args[1], links)}" if args and args[1] is not typing.Any \
            else "mapping"
    if tp is type(None):
        return "null"
    if tp is typing.Any:
        return "any"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        anchor = links.get(tp)
        return f"[section](#{anchor})" if anchor else "section"
    return getattr(tp, "__name__", str(tp))


def plain(value: Any) -> str:
    """A value as YAML writes it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "section"
    return json.dumps(value) if not isinstance(value, str) else value


def default_text(f: dataclasses.Field[Any], tp: Any) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "**required**"
    value = default_of(f)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if get_origin(tp) in (typing.Union, types.UnionType):  # which variant, and its values
            plain_value = to_plain(value)
            others = {k: v for k, v in plain_value.items() if k != "type" and v is not None}
            shown = json.dumps(others)
            short = others and len(shown) <= 40  # long ones: the variant's section has them
            return f"`type: {value.type}`" + (f" with `{shown}`" if short else "")
        return "(below)"
    return f"`{plain(value)}`"


BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("min_len", "at least {} items"))


def bounds_text(meta: Any) -> str:
    parts = []
    for key, sign in BOUNDS:
        if key in meta:
            value = meta[key]
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            parts.append(sign.format(shown) if "{}" in sign else f"{sign} {shown}")
    return "; ".join(parts)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def scenario_page() -> str:
    from blis_simpy.config.scenario import Scenario

    found = list(sections(Scenario))
    links: dict[type, str] = {}
    for section in found:  # a class met at several paths links to the first
        links.setdefault(section.cls, section.anchor)
    lines = [
        "# Scenario file reference",
        "",
        "A scenario is a versioned YAML file; every key is optional unless marked **required**,",
        "and unknown keys are errors. Times are seconds (`*_s`) unless named otherwise (`*_us`,",
        "`*_ms`), rates per second. `blis-simpy validate FILE` checks a file without running it;",
        "the resolved `scenario.yaml` written beside every run's results shows every value,",
        "defaults included. `--set key.path=value` overrides any key from the command line",
        "(`[i]` reaches into a list: `deployment.models[0].configs[0].replicas.max=4`).",
        "",
        "This page is generated from the help text of the configuration classes in",
        "`blis_simpy/config/` at every build of the site, so it always matches the code.",
        "",
    ]
    for section in found:
        doc = inspect.getdoc(section.cls)
        own = section.cls.__doc__ is not None and not doc.startswith(section.cls.__name__ + "(")
        lines += [f"## {section.title} {{ #{section.anchor} }}", ""]
        if own:
            lines += [doc, ""]
        lines += [*field_table(section.cls, links), ""]
    return "\n".join(lines)


def field_table(cls: type, links: dict[type, str]) -> list[str]:
    """A dataclass's fields as Markdown rows: key, type, default, help with its bounds."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        meaning = f.metadata.get("help", "")
        limits = bounds_text(f.metadata)
        if limits:
            meaning = f"{meaning} ({limits})"
        rows.append(f"| `{f.name}` | {cell(type_text(hints[f.name], links))} | "
                    f"{cell(default_text(f, hints[f.name]))} | {cell(meaning)} |")
    return rows


# ------------------------------------------------------------------------- policy templates

def policies_page() -> str:
    from blis_simpy.policies.admission import ADMISSION
    from blis_simpy.policies.autoscale import AUTOSCALE
    from blis_simpy.policies.priority import PRIORITY
    from blis_simpy.policies.routing import ROUTING
    from blis_simpy.policies.scheduler import SCHEDULER

    axes = (("policies.admission", ADMISSION), ("policies.priority", PRIORITY),
            ("policies.routing", ROUTING), ("policies.scheduler", SCHEDULER),
            ("deployment.autoscaler.policy", AUTOSCALE))
    lines = [
        "# Policy templates",
        "",
        "Each decision point takes a template by name and its parameters, or your own class as",
        "`module:Class` (see [Extending](../extending.md)). Parameters are validated like the",
        "scenario file: a wrong one names its YAML path. Generated from the policy registries",
        "(`blis_simpy/policies/`) at every build.",
        "",
    ]
    for key, registry in axes:
        lines += [f"## {registry.axis.capitalize()} (`{key}.type`)", ""]
        for name in registry.names:
            cls = registry.templates[name]
            lines += [f"### `{name}`", "", inspect.getdoc(cls) or "", ""]
            params = getattr(cls, "Params", None)
            if params is None or not any(f.init for f in dataclasses.fields(params)):
                lines += ["No parameters.", ""]
                continue
            lines += [f"Parameters (`{key}.params`):", "", *field_table(params, {}), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------- output files

TABLES = {
    "requests": "one row per request",
    "steps": "one row per engine step",
    "instances": "each instance's queue depth, batch size and KV use at every step",
    "anomalies": "one row per anomaly",
    "decisions": "with `cluster.trace_level` decisions or full: every admission, priority "
                 "and routing decision",
    "preemptions": "one row per preemption, with the tokens it had computed and lost",
}
# tables only some runs write: (the run's overrides of the quickstart, what the table holds)
OPTIONAL_TABLES = {
    "kv_transfers": ({"engine.kv_tiers.cpu_blocks": 4000},
                     "with `engine.kv_tiers`: one row per transfer between tiers (latency: "
                     "until it ends, waiting for the link included)"),
}


def column_rows() -> list[str]:
    """One row per table, its columns as a small two-instance run really writes them."""
    import blis_simpy
    from blis_simpy.config.scenario import Scenario

    small = {"cluster.instances": 2, "cluster.trace_level": "decisions",
             "workload.num_requests": 20}
    path = ROOT / "scenarios" / "quickstart.yaml"
    result = blis_simpy.run(Scenario.from_yaml(path, small))
    rows = ["| table | columns |", "|---|---|"]
    tables = [(name, what, result) for name, what in TABLES.items()]
    tables += [(name, what, blis_simpy.run(Scenario.from_yaml(path, {**small, **changes})))
               for name, (changes, what) in OPTIONAL_TABLES.items()]
    for name, what, run in tables:
        columns = ", ".join(f"`{c}`" for c in getattr(run, name).columns)
        rows.append(f"| `{name}.csv` / `.parquet` | {what}: {columns} |")
    return rows


# ------------------------------------------------------------------------- command line

def cli_page() -> str:
    import typer

    from blis_simpy.cli import app

    lines = ["# Command line", "",
             "Every command of `blis-simpy` (also `python -m blis_simpy`), with its `--help`,",
             "generated from the command-line code at every build.", ""]
    for words in commands(typer.main.get_command(app), []):
        lines += [f"## `{' '.join(['blis-simpy', *words])}`", "", "```text",
                  plain_help(words), "```", ""]
    return "\n".join(lines)


def commands(command: Any, words: list[str]) -> Iterator[list[str]]:
    yield words
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from commands(sub, [*words, name])


def plain_help(words: list[str]) -> str:
    """`--help` as click prints it (typer's rich panels off: no box drawing), 100 wide."""
    env = {**os.environ, "TYPER_USE_RICH": "0", "COLUMNS": "100", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "blis_simpy", *words, "--help"], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.rstrip().replace("Usage: python -m blis_simpy", "Usage: blis-simpy")


PAGES: dict[str, Callable[[], str]] = {
    "reference/scenario.md": scenario_page,
    "reference/policies.md": policies_page,
    "reference/cli.md": cli_page,
}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, page in PAGES.items():
        files.append(File.generated(config, uri, content=page()))
    return files


COLUMNS_MARK = "<!-- columns: generated by scripts/docs_hooks.py -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The output reference's column table (docs/reference/outputs.md holds its place)."""
    if COLUMNS_MARK in markdown:
        return markdown.replace(COLUMNS_MARK, "\n".join(column_rows()))
    return markdown


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for uri, page in PAGES.items():
        (out / uri).parent.mkdir(parents=True, exist_ok=True)
        (out / uri).write_text(page())
