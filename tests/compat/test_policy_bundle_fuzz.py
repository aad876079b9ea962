"""Bad reference policy bundles (`blis-simpy convert policy-config FILE`), generated: wrong
types, unknown keys, broken YAML, binary bytes, alias bombs. Each exits 2 with one `error:` line
naming the file, no traceback and nothing on stdout; alias bombs fail fast."""

from __future__ import annotations

import string
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.cli import app

RUNNER = CliRunner()
VALID: dict[str, Any] = {
    "admission": {"policy": "token-bucket", "token_bucket_capacity": 100,
                  "token_bucket_refill_rate": 10},
    "routing": {"policy": "weighted", "scorers": [{"name": "queue-depth", "weight": 2}]},
    "priority": {"policy": "slo-based"},
    "scheduler": "fcfs",
}
# where -> values the reference refuses there
BAD: dict[tuple[Any, ...], list[Any]] = {
    ("admission", "policy"): ["nosuch", 3, [1], {"a": 1}],
    ("admission", "token_bucket_capacity"): ["abc", -1, 0, [], ".nan"],
    ("admission", "token_bucket_refill_rate"): ["abc", -5, {"x": 1}],
    ("routing", "policy"): ["nosuch", 1.5, ["weighted"]],
    ("routing", "scorers"): ["queue-depth", 3, {"name": "x"}],
    ("routing", "scorers", 0, "name"): ["no-such-scorer", 7, None],
    ("routing", "scorers", 0, "weight"): [-1, 0, "heavy", ".inf"],
    ("priority", "policy"): ["nosuch", {"p": 1}],
    ("scheduler",): ["nosuch", 2, {"policy": "fcfs"}],
    ("admission",): ["token-bucket", 5, [1, 2]],
    ("routing",): ["weighted", 0],
}


def with_value(data: Any, where: tuple[Any, ...], value: Any) -> Any:
    if not where:
        return value
    head, rest = where[0], where[1:]
    copy = list(data) if isinstance(data, list) else dict(data)
    copy[head] = with_value(copy[head], rest, value) if rest else value
    return copy


@st.composite
def bad_bundles(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["value", "unknown-key", "not-yaml", "binary", "bomb",
                                 "top-level"]))
    if kind == "value":
        where = draw(st.sampled_from(sorted(BAD, key=str)))
        data = with_value(VALID, where, draw(st.sampled_from(BAD[where])))
        return yaml.safe_dump(data).encode()
    if kind == "unknown-key":
        section = draw(st.sampled_from(["", "admission", "routing", "priority"]))
        key = "x_" + draw(st.text(string.ascii_lowercase, min_size=1, max_size=8))
        data = dict(VALID) if not section else with_value(VALID, (section, key), 1)
        if not section:
            data[key] = 1
        return yaml.safe_dump(data).encode()
    if kind == "not-yaml":
        return draw(st.sampled_from([b"admission: [", b"a: b: c", b"{routing", b"\t- x\n:",
                                     b"scheduler: fcfs\n  bad indent: 1"]))
    if kind == "binary":
        return b"\xff\xfe" + draw(st.binary(min_size=1, max_size=64))
    if kind == "bomb":
        depth = draw(st.integers(8, 12))
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
                  for i in range(1, depth)]
        return ("\n".join(lines) + "\nadmission: {policy: always-admit}\n").encode()
    return draw(st.sampled_from([b"- admission\n- routing\n", b"42\n", b"'text'\n",
                                 b"[]\n"]))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(bad_bundles())
def test_bad_policy_bundle_exits_2_naming_the_file(tmp_path_factory, content):
    path: Path = tmp_path_factory.mktemp("bundle") / "policy.yaml"
    path.write_bytes(content)
    started = time.perf_counter()
    result = RUNNER.invoke(app, ["convert", "policy-config", str(path)])
    assert time.perf_counter() - started < 5.0, "a hostile bundle must fail fast"
    assert result.exit_code == 2, (content[:200], result.output)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
