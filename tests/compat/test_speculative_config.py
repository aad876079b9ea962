"""Issue 35 items 7 and 8: `convert blis-command` maps vLLM's --speculative-config (a JSON
object: method ngram or draft_model, the draft `model`, num_speculative_tokens; and the
acceptance rate a simulation is given) to engine.speculative; the converted scenario is native
and runs; bad values fail naming the flag."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import blis_simpy
from blis_simpy.cli import app
from blis_simpy.compat.convert import blis_command
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.compat.helpers import LLAMA
from tests.compat.test_head_flags import RUN

ROOFLINE = ["run", "--model", LLAMA, "--latency-model", "roofline", "--hardware", "H100",
            "--tp", "1", "--num-requests", "20", "--rate", "20"]


def spec(**config) -> list[str]:
    return ["--speculative-config", json.dumps(config)]


def test_an_ngram_config_converts_to_native_speculation_and_runs():
    data = blis_command([*RUN, *spec(method="ngram", num_speculative_tokens=3,
                                     prompt_lookup_max=4, acceptance_rate=0.6)])
    assert data["engine"]["speculative"] == {"method": "ngram", "draft_tokens": 3,
                                             "acceptance_rate": 0.6}
    assert data["compat"] == "none"
    result = blis_simpy.run(Scenario.from_dict(data))
    assert result.summary["speculation"]["draft_tokens"] == 3


def test_a_draft_model_config_converts_with_its_model_and_runs_on_the_roofline():
    data = blis_command([*ROOFLINE, *spec(method="draft_model",
                                          model="Qwen/Qwen2.5-1.5B-Instruct",
                                          num_speculative_tokens=5, acceptance_rate=0.8)])
    assert data["engine"]["speculative"] == {
        "method": "draft_model", "model": "Qwen/Qwen2.5-1.5B-Instruct", "draft_tokens": 5,
        "acceptance_rate": 0.8}
    result = blis_simpy.run(Scenario.from_dict(data))
    assert result.summary["speculation"]["draft_model"] == "Qwen/Qwen2.5-1.5B-Instruct"
    # the KV cache is sized from memory, the draft's share taken out (not the 1,000,000 default)
    assert "kv_blocks" not in data["engine"]
    plain = blis_command(ROOFLINE)
    del plain["engine"]["kv_blocks"]  # the same GPUs' memory without the draft, natively
    plain["compat"] = "none"
    alone = resolve(Scenario.from_dict(plain)).engine.kv_blocks
    assert 0 < resolve(Scenario.from_dict(data)).engine.kv_blocks < alone < 1_000_000


def test_an_unknown_draft_model_is_refused_when_converting():
    with pytest.raises(ScenarioError) as err:
        blis_command([*ROOFLINE, *spec(model="nope/nope", num_speculative_tokens=2,
                                       acceptance_rate=0.5)])
    assert err.value.path == "--speculative-config" and "model" in err.value.problem


def test_a_named_model_means_draft_model_as_in_vllm():
    data = blis_command([*ROOFLINE, *spec(model="qwen/qwen2.5-1.5b-instruct",
                                          num_speculative_tokens=2, acceptance_rate=0.5)])
    assert data["engine"]["speculative"]["method"] == "draft_model"


@pytest.mark.parametrize(("flags", "needle"), [
    (["--speculative-config", "{method: ngram"], "is not JSON"),
    (["--speculative-config", "[1, 2]"], "JSON object"),
    (spec(method="eagle", model="x", num_speculative_tokens=2, acceptance_rate=0.5),
     "'eagle'"),
    (spec(method="ngram", num_speculative_tokens=2), "'acceptance_rate'"),
    (spec(method="ngram", acceptance_rate=0.5), "'num_speculative_tokens'"),
    (spec(method="ngram", num_speculative_tokens=2, acceptance_rate=0.5, draft_tp=2),
     "'draft_tp'"),
    (spec(method="ngram", num_speculative_tokens=0, acceptance_rate=0.5),
     "num_speculative_tokens: must be >= 1"),
    (spec(method="ngram", num_speculative_tokens=2, acceptance_rate=2),
     "acceptance_rate: must be <= 1"),
    (spec(method="draft_model", model="qwen/qwen2.5-1.5b-instruct",
          num_speculative_tokens=2, acceptance_rate=0.5), "blackbox"),
])
def test_a_bad_speculative_config_fails_naming_the_flag(flags, needle):
    with pytest.raises(ScenarioError) as err:
        blis_command([*RUN, *flags])
    assert err.value.path == "--speculative-config", str(err.value)
    assert needle in str(err.value)


def test_the_command_line_converts_it():
    out = CliRunner().invoke(app, ["convert", "blis-command", "--", *RUN,
                                   *spec(method="ngram", num_speculative_tokens=4,
                                         acceptance_rate=0.7)])
    assert out.exit_code == 0, out.output
    assert "speculative" in out.output and "--speculative-config" in out.output
