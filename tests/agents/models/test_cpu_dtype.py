"""vLLM's dtype "auto" computes in bfloat16 (a bf16 checkpoint as stored, a float32 one
downcast); on a CPU without fast bfloat16 GEMMs that is a scalar loop about 50x slower than
float32, so the CPU engine is given float32 there."""

from __future__ import annotations

import json

import pytest

from agents.models.cpu import cpu_bf16_fast, cpu_engine_dtype


def _folder(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    return tmp_path


@pytest.mark.parametrize("fast,want", [(False, "float32"), (True, "auto")])
def test_auto_becomes_float32_only_where_bf16_is_slow(fast, want):
    # vLLM's "auto" computes a bf16 checkpoint in bf16 and downcasts a float32 one to bf16
    assert cpu_engine_dtype("auto", fast=fast) == want


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_an_explicit_dtype_is_kept(dtype):
    assert cpu_engine_dtype(dtype, fast=False) == dtype


@pytest.mark.parametrize("stored", ["bfloat16", "float32"])
def test_vllm_engine_gets_the_cpu_dtype(tmp_path, monkeypatch, stored):
    """What ``VLLMModel`` hands vLLM with the default dtype, for a bf16 folder (``--model
    vllm:smollm2``) and a float32 one (a trainer's checkpoint): float32 on this CPU unless it
    multiplies bf16 fast."""
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
        VLLMModel(_folder(tmp_path, dtype=stored))
    assert seen["dtype"] == ("auto" if cpu_bf16_fast() else "float32")
