"""The rollout engine gets what the run's config says (a colocated vLLM must leave the learner room;
its log lines go to the run folder unless --verbose)."""

from __future__ import annotations

from pathlib import Path

import pytest

import agents.models.vllm as vllm_backend
from algos.config import ConfigError, parse_config
from algos.dapo import DAPOConfig
from algos.policy import build_policy
from tests.algos.toy_run import toy_argv, toy_cfg


def test_vllm_engine_takes_the_configured_gpu_memory_share(tmp_path: Path, monkeypatch):
    seen: dict = {}

    class Recorder:  # stands in for the engine: only the arguments it is built with matter here
        def __init__(self, path, **kw):
            seen.update(kw, path=path)

    monkeypatch.setattr(vllm_backend, "VLLMModel", Recorder)
    build_policy(toy_cfg(tmp_path, engine="vllm", engine_gpu_memory=0.3), tmp_path / "run")
    assert seen["gpu_memory_utilization"] == 0.3
    assert seen["max_model_len"] == 128


@pytest.mark.parametrize("flag, verbose", [([], False), (["--verbose"], True)])
def test_vllm_engine_logs_to_the_run_folder_unless_verbose(
    tmp_path: Path, monkeypatch, flag, verbose
):
    seen: dict = {}

    class Recorder:
        def __init__(self, path, **kw):
            seen.update(kw)

    monkeypatch.setattr(vllm_backend, "VLLMModel", Recorder)
    cfg = parse_config(
        DAPOConfig, [*toy_argv(engine="vllm"), *flag], prog="t", description="", prefix="dapo"
    )
    build_policy(cfg, tmp_path / "run")
    assert seen["log_file"] == tmp_path / "run" / "engine.log"
    assert seen["verbose"] is verbose


@pytest.mark.parametrize("share", [0.0, 1.5, -0.2])
def test_engine_gpu_memory_outside_its_range_is_refused(tmp_path: Path, share):
    with pytest.raises(ConfigError, match=f"engine_gpu_memory.*{share}"):
        toy_cfg(tmp_path, engine_gpu_memory=share)
