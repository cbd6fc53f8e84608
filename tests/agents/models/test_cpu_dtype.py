"""A half-precision checkpoint run in its own dtype ("auto") on a CPU without fast bfloat16 GEMMs
takes a scalar loop about 50x slower than float32: the CPU engines load it in float32 there."""

from __future__ import annotations

import json

import pytest

from agents.models.cpu import checkpoint_dtype, cpu_bf16_fast, cpu_engine_dtype


def _folder(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    return tmp_path


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_checkpoint_dtype_reads_either_key(tmp_path, key):
    assert checkpoint_dtype(_folder(tmp_path, **{key: "bfloat16"})) == "bfloat16"


def test_checkpoint_dtype_of_a_folder_without_config_is_unknown(tmp_path):
    assert checkpoint_dtype(tmp_path) is None


@pytest.mark.parametrize("stored,fast,want", [
    ("bfloat16", False, "float32"),   # the slow path avoided
    ("float16", False, "float32"),
    ("bfloat16", True, "auto"),       # AVX-512 / AMX: bf16 is fast, keep it
    ("float32", False, "auto"),       # nothing to change
    (None, False, "auto"),
])
def test_auto_on_a_half_checkpoint_becomes_float32_only_where_bf16_is_slow(
        tmp_path, stored, fast, want):
    folder = _folder(tmp_path, **({"dtype": stored} if stored else {}))
    assert cpu_engine_dtype("auto", folder, fast=fast) == want


def test_an_explicit_dtype_is_kept(tmp_path):
    folder = _folder(tmp_path, dtype="bfloat16")
    assert cpu_engine_dtype("bfloat16", folder, fast=False) == "bfloat16"


def test_vllm_engine_gets_the_cpu_dtype(tmp_path, monkeypatch):
    """What ``VLLMModel`` hands vLLM for a bf16 folder with the default dtype (``--model
    vllm:smollm2`` is such a folder): float32 on this CPU unless it multiplies bf16 fast."""
    vllm = pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("a GPU platform keeps the checkpoint's dtype")  # the CPU CI never skips
    seen = {}

    class Stop(Exception):
        pass

    def fake_llm(**kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(vllm, "LLM", fake_llm)
    from agents.models.vllm import VLLMModel

    with pytest.raises(Stop):
        VLLMModel(_folder(tmp_path, dtype="bfloat16"))
    assert seen["dtype"] == ("auto" if cpu_bf16_fast() else "float32")
