"""Bad command lines and output paths, generated: every one exits 2 with an error naming the
flag, field or path, without a traceback, printing no summary and writing nothing."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.cli import app
from tests.conftest import BASE, merge

RUNNER = CliRunner()
SMALL = {"workload": {"num_requests": 5}, "outputs": {"tables": "csv"}}
BAD_VALUES: dict[str, list[str]] = {  # field -> values it must refuse
    "seed": ["abc", "1.5", "[]", "1e400", "{a: 1}"],
    "name": ["'../x'", "/abs", "''", ".hidden", "a/b"],
    "horizon_s": ["-1", "0", "abc", ".nan", "1e400"],
    "engine.kv_blocks": ["0", "-1", "1.5", "abc", "1e12"],
    "engine.block_size": ["0", "-1", "abc", "5000"],
    "engine.max_scheduled_tokens": ["0", "abc", "[1, 2"],
    "cluster.instances": ["0", "5000", "abc"],
    "workload.rate_per_s": ["0", "-1", ".nan", "abc", "1e-300", "-.inf"],
    "workload.num_requests": ["0", "1e12", "abc", "&a [*a]"],
    "workload.prompt.mean": ["-1", "abc", "{}"],
    "policies.routing.type": ["nosuch", "'mod:'", "1", "'no_such_module_xyz:C'"],
    "policies.admission.type": ["nosuch", "null"],
    "latency.alpha": ["[1]", "abc", "[-1, 0, 0]"],
    "outputs.tables": ["xlsx", "1"],
    "model.name": ["[]", "{a: 1}"],
}


def texts(alphabet: str = string.printable, max_size: int = 30) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, max_size=max_size)


@st.composite
def bad_set(draw: st.DrawFn) -> list[str]:
    kind = draw(st.sampled_from(["no-equals", "bad-value", "unknown-key", "empty-key"]))
    if kind == "no-equals":
        return ["--set", draw(texts(string.ascii_letters + "._", 20)).replace("=", "")]
    if kind == "empty-key":
        return ["--set", "=" + draw(texts(max_size=10))]
    if kind == "unknown-key":
        key = draw(st.sampled_from(sorted(BAD_VALUES))) + "x" + draw(
            texts(string.ascii_lowercase, 5))
        return ["--set", f"{key}=1"]
    field = draw(st.sampled_from(sorted(BAD_VALUES)))
    return ["--set", f"{field}={draw(st.sampled_from(BAD_VALUES[field]))}"]


@st.composite
def bad_flag(draw: st.DrawFn) -> list[str]:
    kind = draw(st.sampled_from(["seed", "weights", "unknown-option"]))
    if kind == "seed":
        return ["--seed", draw(st.sampled_from(["x", "1.5", "", "1e3", "--", "0x"]))]
    if kind == "weights":
        weight = draw(st.sampled_from(["throughput:x", "nosuchkey:1", "throughput", ":",
                                       "p99_ttft:-1", "throughput:nan", ",,", "a:b:c"]))
        return ["--fitness-weights", weight]
    return ["--" + draw(texts(string.ascii_lowercase, 12)).strip() + "zz"]


CASES = st.one_of(
    bad_set().map(lambda args: ("args", args)),
    bad_flag().map(lambda args: ("args", args)),
    st.sampled_from(["file", "inside-file", "dotdot-name", "used-folder"]).map(
        lambda kind: ("out", kind)),
    st.sampled_from(["missing", "directory", "not-utf8", "not-yaml", "binary", "empty",
                     "a-list"]).map(lambda kind: ("scenario", kind)),
)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def build_case(folder: Path, case: tuple[str, Any]) -> list[str]:
    """Files for the case in `folder`, and the command line."""
    scenario = folder / "s.yaml"
    scenario.write_text(yaml.safe_dump(merge(BASE, SMALL)))
    out = folder / "out"
    what, detail = case
    if what == "args":
        return ["run", str(scenario), "--out", str(out), *detail]
    if what == "out":
        blocker = folder / "blocker"
        blocker.write_text("a file")
        if detail == "file":
            return ["run", str(scenario), "--out", str(blocker)]
        if detail == "inside-file":
            return ["run", str(scenario), "--out", str(blocker / "run")]
        if detail == "dotdot-name":
            return ["run", str(scenario), "--set", "name=../escaped"]
        out.mkdir()
        (out / "earlier.csv").write_text("stale")
        return ["run", str(scenario), "--out", str(out)]
    bad = folder / "bad.yaml"
    contents = {"missing": None, "directory": None, "not-utf8": b"name: \xff\xfe\n",
                "not-yaml": b"version: [1\n  model: {", "binary": bytes(range(256)),
                "empty": b"", "a-list": b"- 1\n- 2\n"}[detail]
    if detail == "directory":
        bad.mkdir()
    elif contents is not None:
        bad.write_bytes(contents)
    return ["run", str(bad), "--out", str(out)]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(CASES)
def test_bad_command_line_or_output_path_exits_2_and_writes_nothing(tmp_path_factory, case):
    folder = tmp_path_factory.mktemp("cli")
    args = build_case(folder, case)
    before = snapshot(folder)
    result = RUNNER.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, (case, result.output)
    assert "Traceback" not in result.output
    assert result.stdout == "", case
    assert snapshot(folder) == before, case
    message = result.stderr
    if message.startswith("error: "):  # ours: one line naming what was wrong
        assert message.count("\n") == 1, message
    else:  # the option parser's usage error names the option
        assert "Invalid value" in message or "No such option" in message, message
