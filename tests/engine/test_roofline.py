"""Tests for the roofline step-time model against the reference Go BLIS check values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from blis_simpy.config.catalog import bundled_hardware_config, bundled_model_config
from blis_simpy.engine.roofline import GpuSpec, ModelShape, RooflineModel

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MODEL_CONFIGS_DIR = Path(__file__).resolve().parents[2] / "blis_simpy" / "data" / "model_configs"


def _model(tp: int, model: str = LLAMA, gpu: str = "H100") -> RooflineModel:
    shape = ModelShape.from_hf_config(bundled_model_config(model))
    return RooflineModel(shape, GpuSpec.from_hardware_config(bundled_hardware_config(), gpu), tp)


def _llama_config(**overrides: object) -> dict:
    config = dict(bundled_model_config(LLAMA))
    config.update(overrides)
    return config


@pytest.mark.parametrize(
    ("prefills", "decodes", "tp", "expected"),
    [
        ([(0, 512)], [], 1, 12367),
        ([(0, 512)], [], 2, 8033),
        ([], [1000] * 8, 1, 7363),
        ([], [1000] * 8, 2, 5532),
        ([(256, 1024)], [600, 2000], 1, 29976),
        ([(256, 1024)], [600, 2000], 2, 16838),
    ],
)
def test_matches_reference_check_values(prefills, decodes, tp, expected) -> None:
    assert _model(tp).step_time(prefills, decodes) == expected


def test_llama_shape_parsed() -> None:
    shape = ModelShape.from_hf_config(bundled_model_config(LLAMA))
    assert shape == ModelShape(32, 4096, 32, 8, 14336, 2)


@pytest.mark.parametrize("name", sorted(p.name for p in MODEL_CONFIGS_DIR.iterdir() if p.is_dir()))
def test_every_bundled_model_config_loads(name: str) -> None:
    roofline = _model(1, model=f"some-org/{name.upper()}")
    assert roofline.step_time([(0, 128)], [64, 256]) > 0


def test_text_config_overrides_top_level() -> None:
    config = _llama_config(text_config={"num_hidden_layers": 7, "num_key_value_heads": 0})
    shape = ModelShape.from_hf_config(config)
    assert (shape.layers, shape.kv_heads) == (7, shape.heads)


def test_missing_optional_dims_take_defaults() -> None:
    config = _llama_config()
    del config["num_key_value_heads"], config["intermediate_size"]
    shape = ModelShape.from_hf_config(config)
    assert (shape.kv_heads, shape.intermediate) == (32, 4 * 4096)


def test_bundled_hardware_config_has_both_gpus() -> None:
    assert {"H100", "A100-SXM"} <= set(bundled_hardware_config())


def test_unknown_bundled_model_lists_available() -> None:
    with pytest.raises(ValueError, match=re.escape("available: codellama-34b-instruct-hf")):
        bundled_model_config("acme/no-such-model")


def test_bad_dtype_rejected() -> None:
    with pytest.raises(ValueError, match="torch_dtype"):
        ModelShape.from_hf_config(_llama_config(torch_dtype="complex64"))


def test_missing_heads_rejected() -> None:
    config = _llama_config()
    del config["num_attention_heads"]
    with pytest.raises(ValueError, match="num_attention_heads"):
        ModelShape.from_hf_config(config)


def test_zero_heads_rejected() -> None:
    with pytest.raises(ValueError, match="heads must be > 0"):
        ModelShape.from_hf_config(_llama_config(num_attention_heads=0))


@pytest.mark.parametrize("tp", [0, -1])
def test_nonpositive_tp_rejected(tp: int) -> None:
    shape = ModelShape.from_hf_config(bundled_model_config(LLAMA))
    gpu = GpuSpec.from_hardware_config(bundled_hardware_config(), "H100")
    with pytest.raises(ValueError, match="tp must be a positive integer"):
        RooflineModel(shape, gpu, tp)


def test_unknown_gpu_lists_known() -> None:
    with pytest.raises(ValueError, match=r"unknown GPU 'B300'.*H100"):
        GpuSpec.from_hardware_config(bundled_hardware_config(), "B300")


def test_nonpositive_hardware_denominator_rejected() -> None:
    hardware = bundled_hardware_config()
    hardware["H100"] = {**hardware["H100"], "mfuDecode": 0.0}
    gpu = GpuSpec.from_hardware_config(hardware, "H100")
    shape = ModelShape.from_hf_config(bundled_model_config(LLAMA))
    with pytest.raises(ValueError, match="mfu_decode"):
        RooflineModel(shape, gpu, 1)


def test_non_numeric_hardware_field_rejected() -> None:
    hardware = bundled_hardware_config()
    hardware["H100"] = {**hardware["H100"], "BwPeakTBs": "fast"}
    with pytest.raises(ValueError, match="BwPeakTBs"):
        GpuSpec.from_hardware_config(hardware, "H100")


@pytest.mark.parametrize(
    ("tp", "overheads_us"), [(1, 500 + 32 * 20), (2, 500 + 32 * 20 + 32 * 2 * 20)]
)
def test_empty_batch_costs_only_overheads(tp: int, overheads_us: int) -> None:
    assert _model(tp).step_time([], []) == overheads_us


@pytest.mark.parametrize("tp", [1, 2])
def test_step_time_grows_with_new_tokens(tp: int) -> None:
    roofline = _model(tp)
    times = [roofline.step_time([(0, n)], []) for n in (64, 512, 2048, 8192)]
    assert times == sorted(times) and times[0] < times[-1]


@pytest.mark.parametrize("tp", [1, 2])
def test_step_time_grows_with_context(tp: int) -> None:
    roofline = _model(tp)
    decode_times = [roofline.step_time([], [s] * 32) for s in (0, 4000, 32000, 128000)]
    prefill_times = [roofline.step_time([(s, 1024)], []) for s in (0, 4000, 32000)]
    for times in (decode_times, prefill_times):
        assert times == sorted(times) and times[0] < times[-1]


@pytest.mark.parametrize("model", ["llama-3.1-8b-instruct", "qwen2.5-1.5b-instruct"])
@pytest.mark.parametrize("tp", [1, 3])
def test_decode_fast_path_is_bitwise_the_general_formula(model: str, tp: int) -> None:
    """The decode loop folds n = 1 into constants; that must not change a single bit."""
    roofline = _model(tp, model=model)
    progress = [0, 1, 7, 777, 4095, 100_003]
    general = roofline._prefill_sums([(s, 1) for s in progress])
    assert roofline._decode_sums(progress) == general
