"""bfloat16 on CPUs without fast bf16 GEMMs: the CPU preset stays off that path, configs that take
it are warned about (the cause of the README's main job running >9 min per train step)."""

from __future__ import annotations

import platform
import types

import pytest
import torch

from algos.config import parse_config
from algos.dapo import DAPOConfig
from algos.learner import cpu_bf16
from algos.learner.cpu_bf16 import cpu_bf16_fast, slow_bf16_settings, slow_bf16_warning


def _cfg(**kw):
    return types.SimpleNamespace(
        **{"bf16": False, "engine_dtype": "float32", "rollout_model": "policy", **kw}
    )


def test_cpu_preset_never_runs_bf16_gemms_on_a_slow_cpu():
    # the README's main job must be fast on any CPU, AVX2-only laptops included
    cfg = parse_config(
        DAPOConfig, ["--preset", "cpu"], prog="t", description="", prefix="dapo", stages=True
    )
    assert slow_bf16_settings(cfg, on_gpu=False, fast=False) == []


def test_slow_settings_named_on_a_slow_cpu():
    cfg = _cfg(bf16=True, engine_dtype="bfloat16")
    assert slow_bf16_settings(cfg, on_gpu=False, fast=False) == [
        "bf16=true",
        "engine_dtype=bfloat16",
    ]
    message = slow_bf16_warning(cfg, on_gpu=False, fast=False)
    assert "bf16=true, engine_dtype=bfloat16" in message
    assert "bf16=false and engine_dtype=float32" in message


@pytest.mark.parametrize("on_gpu,fast", [(True, False), (False, True)])
def test_no_warning_on_a_gpu_or_a_cpu_with_fast_bf16(on_gpu, fast):
    cfg = _cfg(bf16=True, engine_dtype="bfloat16")
    assert slow_bf16_settings(cfg, on_gpu=on_gpu, fast=fast) == []
    assert slow_bf16_warning(cfg, on_gpu=on_gpu, fast=fast) is None


def test_engine_dtype_ignored_when_another_model_rolls_out():
    cfg = _cfg(engine_dtype="bfloat16", rollout_model="oracle")
    assert slow_bf16_settings(cfg, on_gpu=False, fast=False) == []


def test_dapo_config_warns_before_any_work(monkeypatch):
    monkeypatch.setattr(cpu_bf16, "cpu_bf16_fast", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="scalar loop"):
        DAPOConfig(bf16=True)


def test_cpu_bf16_fast_follows_the_cpu_capability():
    """On x86, torch's capability AVX2 (or less) means no AVX-512: oneDNN has no bf16 GEMM
    there; AVX-512 (with or without AMX) has one. Either machine runs this test."""
    capability = torch.backends.cpu.get_cpu_capability()
    fast = cpu_bf16_fast()
    assert isinstance(fast, bool)
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert fast is capability.startswith("AVX512"), capability
